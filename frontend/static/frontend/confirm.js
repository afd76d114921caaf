// Actions that cannot be taken back ask first: a form or button with data-confirm="…" is
// submitted only once the user agrees (before any other handler of the form sees it).
document.addEventListener("submit", function (event) {
  var form = event.target;
  var button = event.submitter;
  var question = (button && button.dataset.confirm) || (form && form.dataset.confirm);
  if (question && !window.confirm(question)) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
}, true);
