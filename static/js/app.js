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

// Menus: <details data-menu>. Opening one closes the others, a click elsewhere closes
// them, and Escape closes the one holding the focus (giving the focus back to its summary),
// or every open one; the event is then handled: nothing else acts on that Escape.
function openMenus() {
  return Array.from(document.querySelectorAll("details[data-menu][open]"));
}

document.addEventListener(
  "toggle",
  (event) => {
    const menu = event.target;
    if (!(menu instanceof HTMLDetailsElement) || !menu.hasAttribute("data-menu") || !menu.open) return;
    for (const other of openMenus()) {
      if (other !== menu && !other.contains(menu)) other.open = false;
    }
  },
  true,
);

document.addEventListener("click", (event) => {
  for (const menu of openMenus()) {
    if (!menu.contains(event.target)) menu.open = false;
  }
});

document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || event.defaultPrevented) return;
  const open = openMenus();
  if (open.length === 0) return;
  // The menu holding the focus, else (the focus left with a swapped-out control) all of them.
  const focused = document.activeElement && document.activeElement.closest("details[data-menu][open]");
  for (const menu of focused ? [focused] : open) menu.open = false;
  if (focused) focused.querySelector("summary").focus();
  event.preventDefault();
}, true); // capturing: before the page's own Escape (the chat's stops an answer)

// At phone width the top bar's menus fold behind its Menu button (static/css/app.css).
document.addEventListener("DOMContentLoaded", () => {
  const toggle = document.querySelector(".topbar .nav-toggle");
  if (!toggle) return;
  const bar = toggle.closest(".topbar");
  bar.setAttribute("data-collapsible", "");
  toggle.addEventListener("click", () => {
    const open = bar.classList.toggle("nav-open");
    toggle.setAttribute("aria-expanded", String(open));
  });
});
