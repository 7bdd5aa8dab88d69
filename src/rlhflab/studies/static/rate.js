// A key named by a button's data-key answers with it (number keys and U on a rating page,
// A, B, T and X on a pair page); each item's form is sent once.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("rating-form");
  if (!form) return;
  let sent = false;
  form.addEventListener("submit", (event) => {
    if (sent) {
      event.preventDefault();
      return;
    }
    sent = true;
    form.classList.add("sent");
  });
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    const button = form.querySelector(`button[data-key="${CSS.escape(event.key.toLowerCase())}"]`);
    if (button) {
      event.preventDefault();
      form.requestSubmit(button);
    }
  });
});
