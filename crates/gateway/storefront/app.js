// The storefront: a hash-routed single page (the gateway serves only `/`
// and `/assets/*`, so every view lives after the `#`):
//   #/                catalogue, paged with the API's cursors
//   #/product/<id>    one product, its stock ("stock as of N s ago" when
//                     Inventory is down and the count is an older one), add to cart
//   #/cart            the cart (localStorage), sign-in, checkout
//   #/order/<id>      one order, its status followed live until final
//   #/orders          the signed-in customer's orders
// Every answer that is not a 2xx shows in place as a message (the
// problem's `detail`, "try again in N s" after a Retry-After), never as a
// blank page.

import { ApiError, call, session, signIn, signOut, stock } from "./api.js";

const CART_KEY = "shopeasy.cart";
const CHECKOUT_KEY = "shopeasy.checkout";
const PAGE_SIZE = 6;
const FINAL = new Set(["confirmed", "rejected", "cancelled"]);

const view = document.getElementById("view");
/** Bumped on every navigation: work of an older view stops itself. */
let generation = 0;
/** What the last checkout answered, shown once on the order's page. */
let flash = null;
/** The catalogue's cursors: [undefined, page 2's, page 3's, …]. */
let cursors = [undefined];
/** Products seen, by id: an order's lines name only product ids. */
const known = new Map();

/** The product `id` (from what was seen, else fetched once), or null. */
async function productInfo(id) {
  if (!known.has(id)) {
    known.set(
      id,
      call("GET", `/api/products/${encodeURIComponent(id)}`).then(
        (r) => (known.set(id, r.body), r.body),
        () => (known.delete(id), null),
      ),
    );
  }
  return known.get(id);
}

/** What an order's total is in: its first product's currency, if seen. */
function currencyOf(order) {
  const first = known.get(order.items[0]?.product_id);
  return first && !(first instanceof Promise) ? first.currency : null;
}

/** Remembers products shown, so orders can name them. */
function remember(product) {
  known.set(product.id, product);
}

// ---- small DOM helpers -------------------------------------------------

/** An element with attributes (`on…` are listeners) and children. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  el.append(...children.flat().filter((c) => c != null));
  return el;
}

/** `cents` in `currency`; without a currency (an order has none), plain. */
function money(cents, currency) {
  if (!currency) return (cents / 100).toFixed(2);
  try {
    return new Intl.NumberFormat("en", { style: "currency", currency }).format(cents / 100);
  } catch {
    return `${(cents / 100).toFixed(2)} ${currency}`;
  }
}

/** A message in place: `kind` is "error", "info" or "ok". */
function message(text, kind = "error", id = "message") {
  return h("p", { class: `message ${kind}`, id, role: kind === "error" ? "alert" : "status" }, text);
}

/** The view's content, replacing what was there. */
function show(...children) {
  view.replaceChildren(...children.filter((c) => c != null));
}

/** An error answer in place of the view, with a way to try again. */
function showError(e, title) {
  const text = e instanceof ApiError ? e.text : String(e);
  show(
    h("h1", {}, title),
    message(text),
    h("button", { type: "button", id: "retry", onclick: () => route() }, "Try again"),
  );
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- cart (localStorage) -------------------------------------------------

function cart() {
  try {
    return JSON.parse(localStorage.getItem(CART_KEY) ?? "[]");
  } catch {
    return [];
  }
}

function saveCart(lines) {
  localStorage.setItem(CART_KEY, JSON.stringify(lines));
  document.getElementById("cart-count").textContent = String(
    lines.reduce((n, l) => n + l.quantity, 0),
  );
}

function addToCart(product, quantity) {
  const lines = cart();
  const line = lines.find((l) => l.product_id === product.id);
  if (line) line.quantity = Math.min(1000, line.quantity + quantity);
  else
    lines.push({
      product_id: product.id,
      name: product.name,
      price_cents: product.price_cents,
      currency: product.currency,
      quantity,
    });
  saveCart(lines);
}

// ---- header and footer --------------------------------------------------

function renderWho() {
  const who = session();
  const box = document.getElementById("who");
  if (who) {
    box.replaceChildren(
      h("span", { id: "signed-in" }, `Signed in as ${who.customer}`),
      h(
        "button",
        { type: "button", class: "link", onclick: () => (signOut(), renderWho(), route()) },
        "Sign out",
      ),
    );
  } else {
    box.replaceChildren(h("a", { href: "#/cart" }, "Sign in"));
  }
}

document.addEventListener("api-call", (e) => {
  const { method, path, status, traceId } = e.detail;
  document.getElementById("last-call").textContent = `${method} ${path} → ${status || "no answer"}`;
  document.getElementById("trace-id").textContent = traceId;
});

/** A sign-in form; `done` runs once signed in. */
function signInForm(done) {
  const input = h("input", {
    id: "customer",
    name: "customer",
    autocomplete: "username",
    required: true,
    maxlength: "64",
    placeholder: "alice",
  });
  const status = h("div", { id: "signin-message" });
  const form = h(
    "form",
    {
      class: "signin",
      id: "signin",
      onsubmit: async (ev) => {
        ev.preventDefault();
        status.replaceChildren();
        try {
          await signIn(input.value.trim());
          renderWho();
          done();
        } catch (e) {
          status.replaceChildren(message(e instanceof ApiError ? e.text : String(e)));
        }
      },
    },
    h("label", { for: "customer" }, "Your name"),
    input,
    h("button", { type: "submit", id: "signin-button" }, "Sign in"),
    status,
  );
  return form;
}

// ---- views ----------------------------------------------------------------

async function catalogue(mine, page) {
  const cursor = cursors[page];
  const query = `limit=${PAGE_SIZE}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");
  const res = await call("GET", `/api/products?${query}`);
  if (mine !== generation) return;
  const { items, next_cursor: next } = res.body;
  items.forEach(remember);
  if (next) cursors[page + 1] = next;
  const go = (p) => {
    generation += 1;
    catalogue(generation, p).catch((e) => showError(e, "Catalogue"));
  };
  show(
    h("h1", {}, "Catalogue"),
    h(
      "ul",
      { class: "grid", id: "products" },
      items.map((p) =>
        h(
          "li",
          { class: "card", "data-id": p.id },
          h("h2", {}, h("a", { href: `#/product/${p.id}`, class: "product-link" }, p.name)),
          h("p", { class: "desc" }, p.description),
          h("p", { class: "price" }, money(p.price_cents, p.currency)),
          h(
            "button",
            { type: "button", class: "add", onclick: () => addToCart(p, 1) },
            `Add ${p.name} to cart`,
          ),
        ),
      ),
    ),
    h(
      "nav",
      { class: "pager", "aria-label": "Pages" },
      h("button", { type: "button", id: "prev", disabled: page === 0, onclick: () => go(page - 1) }, "Previous"),
      h("span", { id: "page" }, `Page ${page + 1}`),
      h("button", { type: "button", id: "next", disabled: !next, onclick: () => go(page + 1) }, "Next"),
    ),
  );
}

async function product(mine, id) {
  const res = await call("GET", `/api/products/${encodeURIComponent(id)}`);
  if (mine !== generation) return;
  const p = res.body;
  remember(p);
  const qty = h("input", { id: "quantity", type: "number", min: "1", max: "1000", value: "1" });
  const note = h("div", { id: "cart-message", "aria-live": "polite" });
  const stockLine = h("p", { class: "stock", id: "stock", "aria-live": "polite" }, "Checking stock…");
  showStock(mine, id, stockLine);
  show(
    h("p", {}, h("a", { href: "#/" }, "← Catalogue")),
    h(
      "article",
      { class: "product", id: "product" },
      h("h1", {}, p.name),
      h("p", { class: "sku" }, `SKU ${p.sku}`),
      h("p", { class: "desc" }, p.description),
      h("p", { class: "price", id: "price" }, money(p.price_cents, p.currency)),
      stockLine,
      h(
        "p",
        { class: "stock-note" },
        "Stock is checked again when you order; if Inventory is down, ",
        "a recent count answers and the order is confirmed once it is back.",
      ),
      h(
        "form",
        {
          class: "buy",
          onsubmit: (ev) => {
            ev.preventDefault();
            const n = Math.max(1, Math.min(1000, Number(qty.value) || 1));
            addToCart(p, n);
            note.replaceChildren(
              message(`${n} × ${p.name} added to your cart.`, "ok", "added"),
              h("a", { href: "#/cart", id: "go-cart" }, "Go to cart →"),
            );
          },
        },
        h("label", { for: "quantity" }, "Quantity"),
        qty,
        h("button", { type: "submit", id: "add-to-cart" }, "Add to cart"),
      ),
      note,
    ),
  );
}

/**
 * Fills `line` with the product's stock, after the page is shown (the
 * page never waits for Inventory): "N in stock", and when the count is an
 * older one (Inventory down) a "stock as of N s ago" badge; an error says
 * so in place.
 */
async function showStock(mine, id, line) {
  try {
    const s = await stock(id);
    if (mine !== generation) return;
    const count = h("span", { id: "stock-count", class: "count" }, `${s.available} in stock`);
    if (!s.stale) {
      line.replaceChildren(count);
      return;
    }
    const age = h(
      "span",
      {
        class: "badge stale",
        id: "stock-age",
        title: "Inventory is unavailable: this is the last count it gave",
      },
      // Whole seconds, at least 1: a stale count is never "0 s" old.
      `stock as of ${Math.max(1, s.age_seconds)} s ago`,
    );
    line.replaceChildren(count, " ", age);
  } catch (e) {
    if (mine !== generation) return;
    const text = e instanceof ApiError && e.status === 404 ? "Stock unknown" : `Stock unavailable: ${e instanceof ApiError ? e.text : e}`;
    line.replaceChildren(h("span", { id: "stock-count", class: "count" }, text));
  }
}

function cartView(mine) {
  const lines = cart();
  const who = session();
  const status = h("div", { id: "checkout-message", "aria-live": "polite" });
  const total = lines.reduce((n, l) => n + l.price_cents * l.quantity, 0);
  const remove = (id) => {
    saveCart(cart().filter((l) => l.product_id !== id));
    cartView(mine);
  };
  const parts = [h("h1", {}, "Your cart")];
  if (lines.length === 0) {
    parts.push(h("p", { id: "empty-cart" }, "Your cart is empty. ", h("a", { href: "#/" }, "Browse the catalogue.")));
  } else {
    parts.push(
      h(
        "table",
        { class: "lines", id: "cart-lines" },
        h("thead", {}, h("tr", {}, h("th", {}, "Product"), h("th", {}, "Qty"), h("th", {}, "Price"), h("th", {}, ""))),
        h(
          "tbody",
          {},
          lines.map((l) =>
            h(
              "tr",
              {},
              h("td", {}, l.name),
              h("td", {}, String(l.quantity)),
              h("td", {}, money(l.price_cents * l.quantity, l.currency)),
              h("td", {}, h("button", { type: "button", class: "link", onclick: () => remove(l.product_id) }, `Remove ${l.name}`)),
            ),
          ),
        ),
      ),
      h("p", { class: "total", id: "cart-total" }, `Total ${money(total, lines[0].currency)}`),
    );
    if (who) {
      parts.push(
        h("button", { type: "button", id: "checkout", onclick: () => checkout(mine, status) }, "Place order"),
        status,
      );
    } else {
      parts.push(h("p", {}, "Sign in to place your order."), signInForm(() => route()));
    }
  }
  show(...parts);
}

/**
 * Places the cart as one order. Its Idempotency-Key is made once per
 * checkout (per cart content and customer) and kept in sessionStorage
 * until an answer comes, so every repeat — this function's own retries
 * after a lost answer, or the person pressing the button again — is the
 * same request, and the shop answers it once.
 */
async function checkout(mine, status) {
  const who = session();
  const body = { items: cart().map((l) => ({ product_id: l.product_id, quantity: l.quantity })) };
  const fingerprint = `${who.customer}:${JSON.stringify(body)}`;
  let pending = null;
  try {
    pending = JSON.parse(sessionStorage.getItem(CHECKOUT_KEY) ?? "null");
  } catch {
    pending = null;
  }
  if (!pending || pending.fingerprint !== fingerprint) {
    pending = { key: crypto.randomUUID(), fingerprint };
    sessionStorage.setItem(CHECKOUT_KEY, JSON.stringify(pending));
  }
  const button = document.getElementById("checkout");
  button.disabled = true;
  status.replaceChildren(message("Placing your order…", "info", "placing"));
  let res = null;
  for (let attempt = 1; ; attempt += 1) {
    try {
      res = await call("POST", "/api/orders", { body, idempotencyKey: pending.key });
      break;
    } catch (e) {
      // Repeat only what may not have reached the shop (no answer, or a
      // refused connection at the gateway) and a request still in
      // progress; the key makes the repeat safe. Anything else is shown.
      const inProgress = e.status === 409 && String(e.type).endsWith("request-in-progress");
      const lost = e.status === 0 || e.status === 502;
      if (attempt < 3 && (lost || inProgress)) {
        await sleep(Math.min(2000, (e.retryAfter ?? 0.3 * attempt) * 1000));
        if (mine !== generation) return;
        continue;
      }
      if (mine !== generation) return;
      button.disabled = false;
      status.replaceChildren(message(e instanceof ApiError ? e.text : String(e), "error", "checkout-error"));
      return;
    }
  }
  sessionStorage.removeItem(CHECKOUT_KEY);
  saveCart([]);
  flash = { id: res.body.id, status: res.status, replayed: res.replayed };
  location.hash = `#/order/${res.body.id}`;
}

async function order(mine, id) {
  const note = flash && flash.id === id ? flash : null;
  flash = null;
  const statusEl = h("span", { id: "order-status", class: "badge" }, "…");
  const items = h("ul", { class: "items", id: "order-items" });
  const total = h("p", { class: "total", id: "order-total" });
  const live = h("div", { id: "order-message", "aria-live": "polite" });
  const parts = [h("h1", {}, "Order ", h("code", { id: "order-id" }, id))];
  if (note) {
    const what =
      note.status === 201
        ? "Order created (201): the stock is reserved."
        : `Order accepted (${note.status}): Inventory is unavailable, so a recent stock count answered; it is reserved when Inventory is back.`;
    parts.push(message(what, note.status === 201 ? "ok" : "info", "order-code"));
    if (note.replayed) {
      parts.push(
        message(
          "Repeat absorbed: this checkout had already reached the shop, which answered with the same order (Idempotent-Replayed).",
          "info",
          "replayed",
        ),
      );
    }
  }
  parts.push(h("p", {}, "Status: ", statusEl), items, total, live);
  show(...parts);
  // Follow the status until it is final, backing off (0.3 s → 2 s).
  for (let delay = 300; ; delay = Math.min(2000, delay * 1.6)) {
    let o;
    try {
      o = (await call("GET", `/api/orders/${encodeURIComponent(id)}`)).body;
      live.replaceChildren();
    } catch (e) {
      if (mine !== generation) return;
      if (!statusEl.dataset.status) return showError(e, "Order");
      live.replaceChildren(message(e.text, "error", "order-error"));
      await sleep(Math.max(delay, (e.retryAfter ?? 0) * 1000));
      continue;
    }
    const lines = await Promise.all(o.items.map((l) => productInfo(l.product_id)));
    if (mine !== generation) return;
    const currency = lines[0]?.currency ?? null;
    statusEl.textContent = o.status;
    statusEl.dataset.status = o.status;
    statusEl.className = `badge ${o.status}`;
    items.replaceChildren(
      ...o.items.map((l, i) =>
        h(
          "li",
          {},
          `${l.quantity} × `,
          lines[i] ? lines[i].name : h("code", {}, l.product_id),
          ` at ${money(l.unit_price_cents, currency)}`,
        ),
      ),
    );
    total.textContent = `Total ${money(o.total_cents, currency)}`;
    if (FINAL.has(o.status)) return;
    await sleep(delay);
    if (mine !== generation) return;
  }
}

async function orders(mine, cursor) {
  if (!session()) {
    show(h("h1", {}, "My orders"), h("p", {}, "Sign in to see your orders."), signInForm(() => route()));
    return;
  }
  const query = "limit=20" + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");
  const res = await call("GET", `/api/orders?${query}`);
  if (mine !== generation) return;
  const { items, next_cursor: next } = res.body;
  show(
    h("h1", {}, "My orders"),
    items.length === 0
      ? h("p", { id: "no-orders" }, "No orders yet.")
      : h(
          "table",
          { class: "lines", id: "orders" },
          h("thead", {}, h("tr", {}, h("th", {}, "Order"), h("th", {}, "Status"), h("th", {}, "Total"), h("th", {}, "Placed"))),
          h(
            "tbody",
            {},
            items.map((o) =>
              h(
                "tr",
                { "data-id": o.id },
                h("td", {}, h("a", { href: `#/order/${o.id}`, class: "id" }, o.id)),
                h("td", {}, h("span", { class: `badge ${o.status}` }, o.status)),
                h("td", {}, money(o.total_cents, currencyOf(o))),
                h("td", {}, new Date(o.created_at).toLocaleString("en")),
              ),
            ),
          ),
        ),
    next
      ? h("button", { type: "button", id: "more-orders", onclick: () => orders(++generation, next).catch((e) => showError(e, "My orders")) }, "Older orders")
      : null,
  );
}

// ---- routing --------------------------------------------------------------

function route() {
  generation += 1;
  const mine = generation;
  const [, name = "", arg = ""] = location.hash.match(/^#\/([^/]*)\/?(.*)$/) ?? [];
  const run = {
    "": () => ((cursors = [undefined]), catalogue(mine, 0)),
    product: () => product(mine, decodeURIComponent(arg)),
    cart: () => cartView(mine),
    order: () => order(mine, decodeURIComponent(arg)),
    orders: () => orders(mine),
  }[name];
  const titles = { "": "Catalogue", product: "Product", cart: "Your cart", order: "Order", orders: "My orders" };
  if (!run) {
    show(h("h1", {}, "Not found"), message("There is no such page.", "error"), h("a", { href: "#/" }, "Back to the catalogue"));
    return;
  }
  for (const [id, n] of [["nav-catalogue", ""], ["nav-cart", "cart"], ["nav-orders", "orders"]]) {
    const a = document.getElementById(id);
    if (n === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  Promise.resolve()
    .then(run)
    .catch((e) => {
      if (mine === generation) showError(e, titles[name]);
    });
}

window.addEventListener("hashchange", route);
document.addEventListener("signed-out", renderWho);
saveCart(cart());
renderWho();
route();
