/**
 * Where the cluster is and how to reach it: servers, CA, token, tenant, with the
 * environment variables the CLI and the Python client honour.
 *
 * Servers are HTTP addresses: this client speaks the nodes' HTTP/JSON API on each node's
 * `http_listen` (127.0.0.1:7611..7613 in the shipped configs), not the binary client port.
 * An entry is `host:port` (https when a CA is given, else http) or a URL.
 *
 * Environment, used when the option is not given (an empty variable counts as unset):
 * `WEIR_HTTP_SERVERS`, else `WEIR_SERVERS` (comma-separated; default 127.0.0.1:7611);
 * `WEIR_CA` (a PEM file: the nodes are verified against it over TLS); `WEIR_TOKEN` (the
 * bearer token); `WEIR_TENANT` (default "default"); `WEIR_GROUP` (on a cluster of several
 * Raft groups, the data group the client speaks to: the `Weir-Group` header on every request,
 * the nodes' default group without it).
 */

import { readFileSync } from "node:fs";

export const DEFAULT_SERVER = "127.0.0.1:7611";
export const DEFAULT_TENANT = "default";

/** How a client reaches the cluster. */
export interface ClientOptions {
  /** The nodes' HTTP addresses (any node is an entry point). */
  servers?: string | readonly string[];
  /** A PEM CA file, or the PEM text itself, to verify the nodes over TLS. */
  ca?: string;
  /** The bearer token. */
  token?: string;
  /** The tenant operations act in unless told otherwise. */
  tenant?: string;
  /** On a cluster of several Raft groups, the data group the client speaks to (the
   * `Weir-Group` header on every request; default: the nodes' default group). A session is
   * its group's: the client holds the permits of the tenants placed in its group, and a
   * session's request for a tenant of another is refused `WrongGroup` naming that group. */
  group?: number;
  /** How long one request is retried across nodes (ms; at most 10 000, the default). */
  requestDeadlineMs?: number;
  /** Where the client's own account goes (nodes passed over, hedges, keep-alives that
   * failed, sessions ended, background releases); default: nowhere. */
  log?: (message: string) => void;
}

/** Resolved settings of a client. */
export interface Settings {
  readonly urls: readonly string[];
  /** The CA's PEM text, or null (plain HTTP, or the system's roots for https URLs). */
  readonly caPem: string | null;
  readonly token: string | null;
  readonly tenant: string;
  /** The data group the client speaks to, or null (the nodes' default group). */
  readonly group: number | null;
}

function groupOf(option: number | undefined, vars: NodeJS.ProcessEnv): number | null {
  let group = option;
  if (group === undefined) {
    const text = env(vars, "WEIR_GROUP");
    if (text === undefined) return null;
    if (!/^\s*\d+\s*$/.test(text)) throw new TypeError(`WEIR_GROUP must be a group number: got "${text}"`);
    group = Number(text.trim());
  }
  if (!Number.isSafeInteger(group) || group < 0) {
    throw new TypeError(`group must be a group number (0 or more): got ${group}`);
  }
  return group;
}

function env(vars: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = vars[name];
  return v ? v : undefined;
}

/** Base URLs for `servers` (`host:port` or URLs), without a trailing slash. */
export function serverUrls(servers: readonly string[], tls: boolean): string[] {
  const out: string[] = [];
  for (const raw of servers) {
    let s = raw.trim();
    if (!s) continue;
    if (!s.includes("://")) s = (tls ? "https://" : "http://") + s;
    out.push(s.replace(/\/+$/, ""));
  }
  if (out.length === 0) throw new TypeError("no servers given");
  return out;
}

/** Fills what is not given from the environment (module doc). */
export function resolve(options: ClientOptions, vars: NodeJS.ProcessEnv = process.env): Settings {
  let listed: readonly string[];
  if (options.servers === undefined) {
    listed = (env(vars, "WEIR_HTTP_SERVERS") ?? env(vars, "WEIR_SERVERS") ?? DEFAULT_SERVER).split(",");
  } else if (typeof options.servers === "string") {
    listed = options.servers.split(",");
  } else {
    listed = options.servers;
  }
  const ca = options.ca ?? env(vars, "WEIR_CA");
  let caPem: string | null = null;
  if (ca !== undefined) caPem = ca.includes("-----BEGIN") ? ca : readFileSync(ca, "utf8");
  return {
    urls: serverUrls(listed, caPem !== null),
    caPem,
    token: options.token ?? env(vars, "WEIR_TOKEN") ?? null,
    tenant: options.tenant ?? env(vars, "WEIR_TENANT") ?? DEFAULT_TENANT,
    group: groupOf(options.group, vars),
  };
}
