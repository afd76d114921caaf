// Upload form: line numbers beside the manifest textarea, the lines with errors marked, and
// each error's "line N" link selecting that line in the textarea.
(function () {
  "use strict";
  var editor = document.querySelector(".editor");
  if (!editor) return;
  var textarea = editor.querySelector("textarea");
  var gutter = editor.querySelector(".gutter");
  var errorLines = (editor.dataset.errorLines || "").split(/\s+/).filter(Boolean).map(Number);

  function renderGutter() {
    var count = textarea.value.split("\n").length;
    var html = "";
    for (var n = 1; n <= count; n++) {
      html += errorLines.indexOf(n) >= 0 ? '<span class="bad">' + n + "</span>\n" : n + "\n";
    }
    gutter.innerHTML = html;
    gutter.scrollTop = textarea.scrollTop;
  }

  function selectLine(line) {
    var lines = textarea.value.split("\n");
    if (line < 1 || line > lines.length) return;
    var start = 0;
    for (var i = 0; i < line - 1; i++) start += lines[i].length + 1;
    textarea.focus();
    textarea.setSelectionRange(start, start + lines[line - 1].length);
    var lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 18;
    textarea.scrollTop = Math.max(0, (line - 4) * lineHeight);
    gutter.scrollTop = textarea.scrollTop;
  }

  textarea.addEventListener("input", renderGutter);
  textarea.addEventListener("scroll", function () { gutter.scrollTop = textarea.scrollTop; });
  document.querySelectorAll("a.line-ref").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      var line = Number(link.dataset.line);
      var listed = document.getElementById("line-" + line);
      if (listed) listed.scrollIntoView({ block: "nearest" });
      selectLine(line);
    });
  });
  renderGutter();
  if (errorLines.length) {  // show the first marked line, without taking the focus
    var lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 20;
    textarea.scrollTop = Math.max(0, (Math.min.apply(null, errorLines) - 4) * lineHeight);
    gutter.scrollTop = textarea.scrollTop;
  }

  var summary = document.getElementById("error-summary");
  if (summary) summary.focus();
  var first = document.querySelector(".listing li.has-error");
  var box = document.querySelector(".listing-box");
  if (first && box) box.scrollTop = Math.max(0, first.offsetTop - 60);  // the box is position: relative
})();
