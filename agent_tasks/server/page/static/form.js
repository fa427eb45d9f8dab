// A form made from a JSON Schema, and the schema's checks in the browser (the task checks the
// answer again and its refusal is shown next to the field it names).
//
// Rendered: strings (enums as choices, none chosen when required), numbers and integers with
// their bounds, booleans (a yes/no pair),
// arrays (add and remove items), nested objects, local `$ref`s, and `anyOf`/`oneOf` of one
// schema and `null` (an optional value). Anything else falls back to a JSON editor whose text
// is parsed and checked against its schema.

import { el } from "./app.js";

let counter = 0;
/** A new id for a field of the page (its error's id is `${id}-error`). */
export const fieldId = () => `f${++counter}`;
const EMPTY = Symbol("empty");

/** The schema `$ref` points at, in `root` (`#/$defs/X`, `#/definitions/X`, `#`). */
export function resolve(schema, root) {
  let seen = 0;
  while (schema && typeof schema.$ref === "string" && seen++ < 32) {
    if (!schema.$ref.startsWith("#")) return {};
    let target = root;
    for (const part of schema.$ref.slice(1).split("/").filter(Boolean)) {
      target = target ? target[decodeURIComponent(part).replaceAll("~1", "/").replaceAll("~0", "~")] : undefined;
    }
    schema = target || {};
  }
  return schema || {};
}

/** `[inner, nullable]`: the schema of an optional value (`anyOf` of one and `null`). */
function optional(schema) {
  const options = schema.anyOf || schema.oneOf;
  if (!options || options.length !== 2) return [schema, false];
  const rest = options.filter((o) => o.type !== "null");
  return rest.length === 1 ? [{ ...rest[0], ...pick(schema) }, true] : [schema, false];
}
const pick = (s) => Object.fromEntries(["title", "description", "default"].filter((k) => k in s).map((k) => [k, s[k]]));

function typeOf(schema) {
  if (Array.isArray(schema.enum) || "const" in schema) return "enum";
  return typeof schema.type === "string" ? schema.type : null;
}

const RENDERED = new Set(["type", "title", "description", "default", "enum", "const", "minimum",
  "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "format",
  "items", "minItems", "maxItems", "properties", "required", "additionalProperties", "$ref",
  "examples", "multipleOf", "uniqueItems", "$defs", "definitions", "$schema", "$id"]);

/** True when the generator renders `schema` itself (else: the JSON editor). */
function renders(schema) {
  if (!Object.keys(schema).every((k) => RENDERED.has(k))) return false;
  const type = typeOf(schema);
  if (type === "object") return schema.properties !== undefined;
  if (type === "array") return schema.items !== undefined && typeof schema.items === "object";
  return type !== null && type !== "null";
}

/**
 * A form for `schema` (`root`: where its `$ref`s point), starting from `initial`.
 * Returns `{node, read, showErrors}`: `read()` gives `{value, errors}` (the browser's checks),
 * `showErrors(list)` puts each `{path, message}` next to its field ("" is the whole answer).
 */
export function schemaForm(schema, { root = schema, initial, label = "Answer" } = {}) {
  const slots = new Map();
  const widget = build(schema, root, initial, "", label, true, slots);
  const whole = el("p", { class: "error", role: "alert" });
  slots.set("", { error: whole, input: null });
  const node = el("div", { class: "schema-form" }, widget.node, whole);
  const showErrors = (errors) => {
    for (const slot of slots.values()) { slot.error.textContent = ""; slot.input?.removeAttribute("aria-invalid"); }
    for (const { path, message } of errors) {
      let at = path;
      while (!slots.has(at)) at = at.includes("/") ? at.slice(0, at.lastIndexOf("/")) : "";
      const slot = slots.get(at);
      slot.error.textContent = slot.error.textContent ? `${slot.error.textContent}; ${message}` : message;
      slot.input?.setAttribute("aria-invalid", "true");
    }
    const first = errors.length ? [...slots.values()].find((s) => s.error.textContent && s.input) : null;
    first?.input.focus();
  };
  const read = () => {
    let value;
    try { value = widget.get(); } catch (err) { return { value: undefined, errors: [err.field] }; }
    if (value === EMPTY) value = null;
    return { value, errors: validate(schema, value, root) };
  };
  return { node, read, showErrors };
}

function build(schema, root, initial, path, label, required, slots) {
  const [inner, nullable] = optional(resolve(schema, root));
  schema = resolve(inner, root);
  const id = fieldId();
  const error = el("span", { class: "error", id: `${id}-error`, role: "alert" });
  const hint = schema.description ? el("span", { class: "hint", id: `${id}-hint` }, schema.description) : null;
  const title = `${schema.title || label}${required && !nullable ? " *" : ""}`;
  const described = [hint && `${id}-hint`, `${id}-error`].filter(Boolean).join(" ");
  const start = initial !== undefined ? initial : schema.default;
  const type = renders(schema) ? typeOf(schema) : "json";
  const must = required && !nullable;
  // a required choice starts unchosen (a default would be sent without a look); a value
  // given (an approval's arguments, to edit) is shown as it is
  const chosen = initial !== undefined ? initial : must ? undefined : schema.default;
  const unchosen = (message) => { throw Object.assign(new Error(), { field: { path, message } }); };

  if (type === "object") {
    const needed = new Set(schema.required || []);
    const children = Object.entries(schema.properties).map(([name, sub]) => [name,
      build(sub, root, start ? start[name] : undefined, path ? `${path}/${name}` : name, name, needed.has(name), slots)]);
    slots.set(path, { error, input: null });
    const node = el("fieldset", { "aria-describedby": described }, el("legend", {}, title), hint,
      children.map(([, child]) => child.node), error);
    return { node, get: () => {
      const out = {};
      for (const [name, child] of children) {
        const value = child.get();
        if (value !== EMPTY) out[name] = value;
      }
      return Object.keys(out).length || !nullable ? out : EMPTY;
    } };
  }
  if (type === "array") {
    const list = el("div", { class: "array" });
    const items = [];
    const add = (value) => {
      const child = build(schema.items, root, value, `${path}/${items.length}`, `item ${items.length + 1}`, true, slots);
      const row = el("div", { class: "array-item" }, child.node, el("button", { type: "button",
        "aria-label": `Remove item ${items.length + 1}`, onclick: () => { row.remove(); items.splice(items.indexOf(entry), 1); } }, "Remove"));
      const entry = { child, row };
      items.push(entry);
      list.append(row);
    };
    (Array.isArray(start) ? start : []).forEach(add);
    slots.set(path, { error, input: null });
    const node = el("fieldset", { "aria-describedby": described }, el("legend", {}, title), hint, list,
      el("button", { type: "button", onclick: () => add(undefined) }, "Add an item"), error);
    return { node, get: () => items.map((e) => e.child.get()).map((v) => (v === EMPTY ? null : v)) };
  }
  let input;
  let get;
  if (type === "enum") {
    const options = "const" in schema ? [schema.const] : schema.enum;
    input = el("select", { id, "aria-describedby": described },
      el("option", { value: "" }, must ? "choose one…" : "—"),
      options.map((o, i) => el("option", { value: String(i), selected: JSON.stringify(o) === JSON.stringify(chosen) }, typeof o === "string" ? o : JSON.stringify(o))));
    get = () => (input.value !== "" ? options[Number(input.value)] : must ? unchosen("choose one") : EMPTY);
  } else if (type === "boolean") {
    // a labelled yes/no pair (and "no answer" when it may be left out): never a lone checkbox
    // whose unchecked state says nothing
    const radio = (value, text) => {
      const button = el("input", { type: "radio", name: `${id}-choice`, id: `${id}-${text.replace(" ", "-")}`, value: String(value),
        checked: chosen === value || (value === null && chosen === undefined), "aria-describedby": described });
      return [button, el("label", { for: button.id }, text)];
    };
    const [yes, yesLabel] = radio(true, "yes");
    const [no, noLabel] = radio(false, "no");
    const [none, noneLabel] = must ? [null, null] : radio(null, "no answer");
    slots.set(path, { error, input: yes });
    const node = el("fieldset", { class: "field yes-no", "aria-describedby": described }, el("legend", {}, title), hint,
      el("div", { class: "radios" }, yes, yesLabel, no, noLabel, none, noneLabel), error);
    return { node, get: () => (yes.checked ? true : no.checked ? false : must ? unchosen("choose yes or no") : EMPTY) };
  } else if (type === "number" || type === "integer") {
    input = el("input", { id, type: "number", inputmode: type === "integer" ? "numeric" : "decimal",
      step: type === "integer" ? 1 : "any", min: schema.minimum, max: schema.maximum,
      value: typeof start === "number" ? start : null, "aria-describedby": described });
    get = () => {
      if (input.value.trim() === "") return EMPTY;
      const n = Number(input.value);
      if (Number.isNaN(n)) throw Object.assign(new Error(), { field: { path, message: "not a number" } });
      return n;
    };
  } else if (type === "string") {
    const long = (schema.maxLength || 0) > 200 || schema.format === "textarea";
    input = el(long ? "textarea" : "input", { id, type: long ? null : "text", maxlength: schema.maxLength,
      "aria-describedby": described });
    input.value = typeof start === "string" ? start : "";
    get = () => (input.value === "" && (nullable || !required) ? EMPTY : input.value);
  } else {
    input = el("textarea", { id, "aria-describedby": described, spellcheck: "false", class: "json" });
    input.value = start === undefined ? "" : JSON.stringify(start, null, 2);
    get = () => {
      if (input.value.trim() === "") return EMPTY;
      try { return JSON.parse(input.value); } catch (err) {
        throw Object.assign(new Error(), { field: { path, message: `not JSON: ${err.message}` } });
      }
    };
  }
  slots.set(path, { error, input });
  const labelled = type === "json" ? `${title} (JSON)` : title;
  const node = el("div", { class: "field" }, el("label", { for: id }, labelled), hint, input, error);
  return { node, get };
}

const kind = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "number" ? "number" : typeof v);
const isType = (v, t) => (t === "integer" ? Number.isInteger(v) : t === "number" ? typeof v === "number" : kind(v) === t);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** The schema's errors of `value`: `[{path, message}]` (the keywords the form renders, and
 * `anyOf`, `allOf`, `oneOf`, `if`/`then`/`else`); an empty list when it passes. */
export function validate(schema, value, root = schema, path = "") {
  schema = resolve(schema, root);
  if (schema === true || schema === undefined) return [];
  if (schema === false) return [{ path, message: "no value is allowed here" }];
  const errors = [];
  const fail = (message, at = path) => errors.push({ path: at, message });
  const types = schema.type === undefined ? null : [].concat(schema.type);
  if (types && !types.some((t) => isType(value, t))) { fail(`must be ${types.join(" or ")}`); return errors; }
  if (schema.enum && !schema.enum.some((o) => same(o, value))) fail(`must be one of ${schema.enum.map((o) => JSON.stringify(o)).join(", ")}`);
  if ("const" in schema && !same(schema.const, value)) fail(`must be ${JSON.stringify(schema.const)}`);
  if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) fail(schema.minLength === 1 ? "is required" : `at least ${schema.minLength} characters`);
    if (schema.maxLength !== undefined && length > schema.maxLength) fail(`at most ${schema.maxLength} characters`);
    if (schema.pattern) { try { if (!new RegExp(schema.pattern, "u").test(value)) fail(`must match ${schema.pattern}`); } catch { /* the task checks it */ } }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) fail(`at least ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) fail(`at most ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) fail(`more than ${schema.exclusiveMinimum}`);
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) fail(`less than ${schema.exclusiveMaximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail(`at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail(`at most ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === "object") value.forEach((v, i) => errors.push(...validate(schema.items, v, root, `${path ? `${path}/` : ""}${i}`)));
  }
  if (kind(value) === "object") {
    for (const name of schema.required || []) if (!(name in value)) fail(`${name} is required`, path ? `${path}/${name}` : name);
    for (const [name, v] of Object.entries(value)) {
      const at = path ? `${path}/${name}` : name;
      if (schema.properties && name in schema.properties) errors.push(...validate(schema.properties[name], v, root, at));
      else if (schema.additionalProperties === false) fail(`${name} is not allowed`, at);
    }
  }
  if (schema.allOf) for (const part of schema.allOf) errors.push(...validate(part, value, root, path));
  if (schema.anyOf && !schema.anyOf.some((part) => !validate(part, value, root, path).length)) fail("matches none of the choices");
  if (schema.oneOf && schema.oneOf.filter((part) => !validate(part, value, root, path).length).length !== 1) fail("must match exactly one of the choices");
  if (schema.if) {
    const branch = validate(schema.if, value, root, path).length ? schema.else : schema.then;
    if (branch) errors.push(...validate(branch, value, root, path));
  }
  return errors;
}

/** `{path, message}` of the task's refusal (`"arguments/to: ..."`, `"the answer: ..."`). */
export function refusalAt(text) {
  const cut = text.indexOf(": ");
  if (cut < 0) return { path: "", message: text };
  const path = text.slice(0, cut);
  return { path: path === "the answer" || /\s/.test(path) ? "" : path, message: text.slice(cut + 2) };
}
