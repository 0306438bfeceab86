// Configuration pages. No inline script anywhere: the CSP forbids it.
"use strict";

// JSON textareas (data-json) get a "Format JSON" button that re-indents valid JSON and
// says what is wrong with invalid JSON (the server checks it again on save).
function addFormatButtons(root) {
  root.querySelectorAll("textarea[data-json]:not([data-json-ready])").forEach((area) => {
    area.dataset.jsonReady = "1";
    const bar = document.createElement("div");
    bar.className = "json-tools";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "small secondary";
    button.textContent = "Format JSON";
    const label = area.labels && area.labels[0] ? area.labels[0].textContent.replace(/:$/, "") : "";
    if (label) button.setAttribute("aria-label", `Format JSON: ${label}`);
    const note = document.createElement("span");
    note.className = "json-note";
    note.setAttribute("aria-live", "polite");
    bar.append(button, note);
    area.after(bar);
    button.addEventListener("click", () => {
      if (!area.value.trim()) return;
      try {
        area.value = JSON.stringify(JSON.parse(area.value), null, 2);
        note.textContent = "Valid JSON.";
        note.classList.remove("error");
      } catch (error) {
        note.textContent = `Not valid JSON: ${error.message}`;
        note.classList.add("error");
      }
    });
  });
}

document.addEventListener("DOMContentLoaded", () => addFormatButtons(document));
document.addEventListener("htmx:load", (event) => addFormatButtons(event.target));
