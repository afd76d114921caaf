// "Copy" buttons: copy the value of the input named by data-copy and say whether it worked.
(function () {
  "use strict";
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var input = document.getElementById(button.dataset.copy);
      var said = button.parentElement.querySelector(".copied");
      var tell = function (text) { return function () { said.textContent = text; }; };
      var ok = tell("Copied."), fail = tell("Could not copy: select the token and press Ctrl+C.");
      input.select();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(ok, fail);
      } else {
        (document.execCommand("copy") ? ok : fail)();
      }
    });
  });
})();
