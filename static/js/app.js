// Small behaviours the pages share. No inline script anywhere: the CSP forbids it.
"use strict";

// Copy buttons: <button data-copy="#id-of-element">.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  navigator.clipboard.writeText(source.value ?? source.textContent).then(() => {
    button.textContent = "Copied";
  });
});
