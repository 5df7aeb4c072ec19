// The console's one door to the node: `/v1` with the bearer token this tab keeps in
// sessionStorage (never localStorage: it leaves with the tab), and on a node of several
// Raft groups the group the tab looks at (`Weir-Group`). A 401 asks for a token.

const KEY = 'weir.token';
const GROUP_KEY = 'weir.group';
const unauthorized = new Set();

/** The tab's token, or null. */
export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

/** The data group this tab speaks to (sent as `Weir-Group`), or null: the node's default. */
export function group() {
  return sessionStorage.getItem(GROUP_KEY);
}

export function setGroup(g) {
  if (g) sessionStorage.setItem(GROUP_KEY, g);
  else sessionStorage.removeItem(GROUP_KEY);
}

/** Calls `f(message)` whenever the node answers 401. */
export function onUnauthorized(f) {
  unauthorized.add(f);
}

export function notifyUnauthorized(message) {
  for (const f of unauthorized) f(message);
}

/** An answer that was not 2xx: `status`, and the node's `error` name and `message`. */
export class ApiError extends Error {
  constructor(status, body) {
    super(`${status} ${body?.error ?? ''}: ${body?.message ?? 'no answer'}`);
    this.status = status;
    this.error = body?.error;
  }
}

/** Headers with the token and the group, if any. */
export function authHeaders(extra = {}) {
  const headers = { ...extra };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const g = group();
  if (g) headers['Weir-Group'] = g;
  return headers;
}

/** `method path` with an optional JSON body; the parsed JSON answer, or an ApiError. */
export async function api(method, path, body) {
  const headers = authHeaders(body === undefined ? {} : { 'Content-Type': 'application/json' });
  let r;
  try {
    r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { error: 'Unreachable', message: `this node does not answer (${e.message})` });
  }
  let data = null;
  try { data = await r.json(); } catch { data = null; }
  if (r.status === 401) notifyUnauthorized(data?.message);
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

/** `GET path`. */
export const get = (path) => api('GET', path);

/** A path segment, escaped. */
export const seg = (s) => encodeURIComponent(s);
