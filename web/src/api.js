// The console's client for the ops API (/api/ops/) and the order API
// (/v1/orders). Every request goes to the page's own origin.

const TOKEN_KEY = "eventforge.opsToken";

export class Unauthorized extends Error {}
export class NotFound extends Error {}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = getToken();
  if (token && path.startsWith("/api/ops/")) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  if (resp.status === 401) throw new Unauthorized((data && data.error) || "unauthorized");
  if (resp.status === 404) throw new NotFound((data && data.error) || "not found");
  if (!resp.ok) {
    const msg = (data && (data.error || data.message)) || resp.statusText;
    throw new Error(resp.status + ": " + msg);
  }
  return data;
}

export const api = {
  overview: () => request("GET", "/api/ops/overview"),
  trace: (orderID) => request("GET", "/api/ops/orders/" + encodeURIComponent(orderID)),
  metrics: (since) => request("GET", "/api/ops/metrics?since=" + (since || 0)),
  dlq: () => request("GET", "/api/ops/dlq"),
  replay: (partition, offset) => request("POST", "/api/ops/dlq/replay", { partition, offset }),
  drills: () => request("GET", "/api/ops/drills"),
  startDrill: (name, mode) => request("POST", "/api/ops/drills/" + encodeURIComponent(name) + "/runs", { mode }),
  drillRun: (id) => request("GET", "/api/ops/drills/runs/" + encodeURIComponent(id)),
  continueDrill: (id) => request("POST", "/api/ops/drills/runs/" + encodeURIComponent(id) + "/continue"),
  createOrder: () =>
    request("POST", "/v1/orders", {
      customer_id: "console-" + Math.random().toString(36).slice(2, 8),
      currency: "EUR",
      items: [
        { sku: "SKU-CONSOLE-1", quantity: 2, unit_price_cents: 1999 },
        { sku: "SKU-CONSOLE-2", quantity: 1, unit_price_cents: 500 },
      ],
    }),
};
