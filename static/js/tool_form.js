// The tool form's rows (tool_rows.py): add and remove rows, and pick the fields the model
// sees from a sample answer. htmx keeps the rows and the JSON in step (the server converts
// both ways); this file only edits rows in the page. No inline script: the CSP forbids it.
"use strict";

const MAX_PICKS = 200;

function rowsChanged(element) {
  element.dispatchEvent(new Event("rows-changed", { bubbles: true }));
}

// A new row from the list's <template>, numbered as Django's formsets expect.
function addRow(prefix) {
  const total = document.getElementById(`id_${prefix}-TOTAL_FORMS`);
  const template = document.getElementById(`${prefix}-template`);
  const list = document.querySelector(`[data-rows="${prefix}"]`);
  if (!total || !template || !list) return null;
  list.insertAdjacentHTML("beforeend", template.innerHTML.replace(/__prefix__/g, total.value));
  total.value = String(Number(total.value) + 1);
  return list.lastElementChild;
}

function blankRow(prefix) {
  const rows = document.querySelectorAll(`[data-rows="${prefix}"] [data-row]`);
  return Array.from(rows).find((row) =>
    Array.from(row.querySelectorAll("input[type=text]")).every((input) => !input.value.trim()),
  );
}

document.addEventListener("click", (event) => {
  const add = event.target.closest("[data-add-row]");
  if (add) {
    const row = addRow(add.dataset.addRow);
    if (row) {
      row.querySelector("input, select")?.focus();
      rowsChanged(row);
    }
    return;
  }
  const remove = event.target.closest("[data-remove-row]");
  if (remove) {
    const row = remove.closest("[data-row]");
    const list = row.parentElement;
    row.remove();
    rowsChanged(list);
    showPicked();
  }
});

// Picking fields from a sample answer: each leaf (or list of plain values) is a path in
// model_view's syntax (`items.*.name`); ticking adds a row of the model's view.
function leaves(value, path, found) {
  if (found.length >= MAX_PICKS) return found;
  if (Array.isArray(value)) {
    const objects = value.filter((item) => item && typeof item === "object");
    if (objects.length) leaves(objects[0], path ? `${path}.*` : "*", found);
    else if (path) found.push({ path, sample: value });
  } else if (value && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      if (/^[A-Za-z0-9_-]{1,100}$/.test(key)) leaves(item, path ? `${path}.${key}` : key, found);
    }
  } else if (path) {
    found.push({ path, sample: value });
  }
  return found;
}

function viewRows() {
  return Array.from(document.querySelectorAll('[data-rows="view"] [data-row]')).map((row) => ({
    row,
    field: row.querySelector('input[name$="-field"]'),
    path: row.querySelector('input[name$="-path"]'),
  }));
}

function showPicked() {
  const picked = new Set(viewRows().filter((r) => r.field.value.trim()).map((r) => r.path.value));
  document.querySelectorAll("#sample-fields input[type=checkbox]").forEach((box) => {
    box.checked = picked.has(box.value);
  });
}

function pick(path, on) {
  const rows = viewRows();
  if (!on) {
    rows.filter((r) => r.path.value === path).forEach((r) => r.row.remove());
  } else if (!rows.some((r) => r.path.value === path)) {
    const taken = new Set(rows.map((r) => r.field.value));
    const base = path.split(".").filter((part) => part !== "*").pop() || "result";
    let name = base;
    for (let n = 2; taken.has(name); n += 1) name = `${base}_${n}`;
    const row = blankRow("view") || addRow("view");
    if (!row) return;
    row.querySelector('input[name$="-field"]').value = name;
    row.querySelector('input[name$="-path"]').value = path;
  }
  rowsChanged(document.querySelector('[data-rows="view"]'));
}

function listFields() {
  const area = document.getElementById("sample-answer");
  const note = document.getElementById("sample-note");
  const list = document.getElementById("sample-fields");
  list.replaceChildren();
  note.textContent = "";
  note.classList.remove("error");
  if (!area.value.trim()) return;
  let sample;
  try {
    sample = JSON.parse(area.value);
  } catch (error) {
    note.textContent = `Not valid JSON: ${error.message}`;
    note.classList.add("error");
    return;
  }
  const found = leaves(sample, "", []);
  note.textContent = found.length ? `${found.length} fields: tick those the model should see.` : "No fields to pick.";
  for (const { path, sample: value } of found) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = path;
    const code = document.createElement("code");
    code.textContent = path;
    const example = document.createElement("span");
    example.className = "muted";
    example.textContent = JSON.stringify(value)?.slice(0, 60) ?? "";
    label.append(box, " ", code, " ", example);
    list.append(label);
  }
  showPicked();
}

document.addEventListener("input", (event) => {
  if (event.target.id === "sample-answer") listFields();
});
document.addEventListener("change", (event) => {
  if (event.target.closest("#sample-fields")) pick(event.target.value, event.target.checked);
});
document.addEventListener("htmx:afterSwap", showPicked);
document.addEventListener("DOMContentLoaded", () => {
  document.querySelector(".tool-form")?.classList.add("enhanced");
});
