// The storefront's one way to call the API: every call carries a fresh
// W3C traceparent (so the footer can name the trace of the last call), the
// signed-in customer's bearer token, and turns an error answer into an
// ApiError whose message is the problem+json `detail` — with "try again in
// N s" when the answer says when (503 / 429 + Retry-After).

const SESSION_KEY = "shopeasy.session";

/** A failed call: what to show the person, and what the answer said. */
export class ApiError extends Error {
  constructor(status, detail, retryAfter, type) {
    super(detail);
    this.status = status;
    this.detail = detail;
    this.retryAfter = retryAfter;
    this.type = type;
  }

  /** The sentence shown in place of the page's content. */
  get text() {
    const wait = this.retryAfter != null ? ` — try again in ${this.retryAfter} s` : "";
    const code = this.status ? ` (${this.status})` : "";
    return `${this.detail}${wait}${code}`;
  }
}

/** `n` random bytes as lower-case hex. */
function randomHex(n) {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A new traceparent: version 00, a random trace id and span id, sampled. */
export function newTraceparent() {
  const traceId = randomHex(16);
  return { traceId, header: `00-${traceId}-${randomHex(8)}-01` };
}

/** The signed-in customer ({customer, token}) or null; per browser tab. */
export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(SESSION_KEY) ?? "null");
  } catch {
    return null;
  }
}

/** Signs `customer` in through `POST /api/session`; keeps the token. */
export async function signIn(customer) {
  const res = await call("POST", "/api/session", { body: { customer }, anonymous: true });
  const token = res.body?.access_token;
  if (!token) throw new ApiError(res.status, "the sign-in answer had no token", null);
  sessionStorage.setItem(SESSION_KEY, JSON.stringify({ customer, token }));
  return session();
}

/** Forgets the token. */
export function signOut() {
  sessionStorage.removeItem(SESSION_KEY);
}

/** Seconds from a Retry-After field (delta-seconds or an HTTP date). */
function retryAfterSeconds(value) {
  if (value == null) return null;
  const n = Number(value);
  if (Number.isFinite(n)) return Math.max(0, Math.ceil(n));
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/**
 * One API call. Resolves to {status, body, headers, replayed, traceId} for
 * a 2xx answer; rejects with an ApiError otherwise (a network failure is
 * status 0). `idempotencyKey` is sent as `Idempotency-Key`.
 */
export async function call(method, path, { body, idempotencyKey, anonymous } = {}) {
  const trace = newTraceparent();
  const headers = { accept: "application/json", traceparent: trace.header };
  const who = session();
  if (who && !anonymous) headers.authorization = `Bearer ${who.token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (e) {
    announce({ method, path, status: 0, traceId: trace.traceId });
    throw new ApiError(0, `the shop could not be reached (${e.message})`, null, "network");
  }
  announce({ method, path, status: res.status, traceId: trace.traceId });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (res.status === 401 && who && !anonymous) {
    // The token expired or its key changed: ask for a new sign-in.
    signOut();
    document.dispatchEvent(new CustomEvent("signed-out"));
  }
  if (!res.ok) {
    const detail = parsed?.detail ?? parsed?.title ?? (text.trim() || res.statusText || "the request failed");
    throw new ApiError(res.status, detail, retryAfterSeconds(res.headers.get("retry-after")), parsed?.type);
  }
  return {
    status: res.status,
    body: parsed,
    headers: res.headers,
    replayed: res.headers.get("idempotent-replayed") === "true",
    traceId: trace.traceId,
  };
}

/** Tells the page (its footer) about the call just answered. */
function announce(detail) {
  document.dispatchEvent(new CustomEvent("api-call", { detail }));
}

/**
 * A product's stock, `GET /api/stock/{id}` (anonymous: stock is not
 * personal, so no token is sent): {available, stale, age_seconds, as_of}.
 * `stale` means Inventory is down and this is the last count it gave.
 */
export async function stock(id) {
  const res = await call("GET", `/api/stock/${encodeURIComponent(id)}`, { anonymous: true });
  return res.body;
}
