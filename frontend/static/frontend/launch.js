// Launch form: offer the chosen model's versions and frameworks, its training dataset, and the
// chosen dataset's splits. The hub validates everything again; this only saves typing.
(function () {
  "use strict";
  var form = document.getElementById("launch-form");
  var data = document.getElementById("launch-catalog");
  if (!form || !data) return;
  var catalog = JSON.parse(data.textContent);
  var field = function (name) { return form.elements.namedItem(name); };

  function datalist(input, id, values) {
    var list = document.getElementById(id);
    if (!list) {
      list = document.createElement("datalist");
      list.id = id;
      input.after(list);
      input.setAttribute("list", id);
    }
    list.replaceChildren.apply(list, values.map(function (value) {
      var option = document.createElement("option");
      option.value = value;
      return option;
    }));
  }

  function onModel(initial) {
    var model = catalog.models[field("model").value];
    if (!model) return;
    datalist(field("model_version"), "model-versions", ["*"].concat(model.versions));
    var framework = field("framework");
    Array.prototype.forEach.call(framework.options, function (option) {
      var offered = model.frameworks.indexOf(option.value) >= 0;
      option.textContent = option.textContent.replace(/ \(not published\)$/, "") +
        (offered ? "" : " (not published)");
    });
    if (!initial && model.frameworks.indexOf(framework.value) < 0) framework.value = model.frameworks[0];
    if (!initial && catalog.datasets[model.dataset]) {
      field("dataset").value = model.dataset;
      onDataset();
    }
  }

  function onDataset() {
    var dataset = catalog.datasets[field("dataset").value];
    if (!dataset) return;
    datalist(field("dataset_version"), "dataset-versions", ["*"].concat(dataset.versions));
    datalist(field("split"), "dataset-splits", dataset.splits);
  }

  function onDevice() {
    var gpu = form.querySelector('input[name="device"]:checked');
    field("gpu_model").disabled = !gpu || gpu.value !== "gpu";
  }

  field("model").addEventListener("change", function () { onModel(false); });
  field("dataset").addEventListener("change", onDataset);
  form.querySelectorAll('input[name="device"]').forEach(function (radio) {
    radio.addEventListener("change", onDevice);
  });
  onModel(true);
  onDataset();
  onDevice();
  var summary = document.getElementById("error-summary");
  if (summary) summary.focus();
})();
