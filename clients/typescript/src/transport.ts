/**
 * HTTP to the cluster: which node to ask, when a node is silent, what to retry. The rules
 * are the Python client's (`clients/python/src/weir/_transport.py`) and the Rust
 * library's.
 *
 * Why node:http and node:https, not fetch. Node 20's `fetch` cannot be given a CA without
 * undici's `Agent` (a dependency: Node 20 does not export it), and a cluster over TLS is
 * verified against its own CA. So every request goes through node:http / node:https with
 * keep-alive agents, one code path for both.
 *
 * Any node is an entry point. Every node serves the whole API (a follower forwards to the
 * leader; 503 NoLeader while there is none). The client keeps one *current* node and
 * sends everything there, moving to the next server when the current one refuses a
 * connect, answers 503, or falls silent.
 *
 * A silent node versus a busy one. A stopped node (SIGSTOP, a frozen VM) keeps its sockets
 * open: requests just wait, and a per-request timeout cannot tell it from a busy node. So
 * while a request or an event stream is open on a node, the client asks the node's
 * `/healthz` every {@link PROBE_EVERY_MS}; the HTTP server answers it without the cluster,
 * so a busy node answers and a stopped one does not. A request whose node has been heard
 * from neither by its answer nor by a probe for {@link SILENCE_MAX_MS} (the 1 s silence
 * rule, G9) is given up (a write's outcome is then unknown), the node is passed over for
 * {@link SUSPECT_FOR_MS}, and the request goes to the next node at once (every write is
 * idempotent). A killed node refuses connections, which is seen at once.
 *
 * Retries. A request is tried at most {@link ATTEMPTS_MAX} times within its deadline
 * ({@link REQUEST_DEADLINE_MS}, below the 15 s for which the cluster remembers a finished
 * ticket, so a retried acquire is answered as before). A write that may have been applied
 * on some try and then ran out of tries is OutcomeUnknown, never "failed".
 *
 * Hedging. {@link Transport.hedge} sends an idempotent request to the other nodes while
 * the current one has not answered it; the node that answers becomes the current one
 * (the session module says when a request is hedged).
 *
 * It must never: follow HTTP proxies from the environment (nodes are reached directly),
 * retry a request that the cluster refused, or leave a probe running once no request is
 * open on its node.
 */

import * as http from "node:http";
import * as https from "node:https";

import type { Settings } from "./config.js";
import {
  OutcomeUnknown,
  ProtocolError,
  TlsUntrusted,
  Unavailable,
  WeirError,
  fromResponse,
} from "./errors.js";
import { VERSION } from "./version.js";

/** A node heard from neither by an answer nor by a probe for this long is silent (ms). */
export const SILENCE_MAX_MS = 1000;
/** How often a request in flight looks at its node's silence (ms). */
const SILENCE_CHECK_MS = 50;
/** How often a node in use is probed (`GET /healthz`) (ms). */
export const PROBE_EVERY_MS = 200;
/** Longest one probe waits (ms). */
const PROBE_TIMEOUT_MS = 1000;
/** How long a silent node is passed over (ms). */
export const SUSPECT_FOR_MS = 3000;
/** Pause between tries when a node cannot serve now (ms), jittered 50-150 %. */
const RETRY_PAUSE_MS = 100;
/** Longest a request is retried for (ms). */
export const REQUEST_DEADLINE_MS = 10_000;
/** Most tries of one request. */
const ATTEMPTS_MAX = 200;
/** Longest a TCP (and TLS) connect may take (ms). */
const CONNECT_TIMEOUT_MS = 2000;
/** Longest one try waits for its answer (ms): a node answers within its own client's
 * 10 s deadline at worst. */
const RESPONSE_TIMEOUT_MS = 15_000;
/** Most tries of one hedge. */
const HEDGE_TRIES = 20;
/** Largest answer body read (bytes): the API's answers are far smaller. */
const ANSWER_BYTES_MAX = 4 << 20;
/** Longest event line kept (bytes): an event is a small JSON object. */
const EVENT_LINE_BYTES_MAX = 1 << 20;

/** `ms` scaled by a factor in [0.5, 1.5): clients that lost their node at the same
 * instant do not come back in step. */
export function jittered(ms: number): number {
  return ms * (0.5 + Math.random());
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** One configured server and what the client knows of it. */
export class Node {
  /** Passed over until then (performance.now()). */
  suspectUntil = 0;
  /** The last answer of any kind from it (performance.now()). */
  lastHeard = 0;
  /** Requests and streams open on it now. */
  users = 0;
  probing = false;
  constructor(
    readonly url: string,
    readonly index: number,
  ) {}
  suspected(now: number): boolean {
    return now < this.suspectUntil;
  }
  heard(): void {
    this.lastHeard = performance.now();
  }
}

/** How one try failed before an answer arrived. */
type TryFailure =
  /** No connection was made: nothing was sent. */
  | "connect"
  /** The connection broke after the request may have been sent. */
  | "broken"
  /** The node fell silent (the silence rule). */
  | "silent"
  /** The server's certificate did not verify against the CA. */
  | "tls";

class TryFailed extends Error {
  constructor(
    readonly kind: TryFailure,
    message: string,
  ) {
    super(message);
  }
}

/** A node's answer to one try. */
interface Answer {
  status: number;
  retryAfter: string | null;
  json: unknown;
}

const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "EADDRNOTAVAIL",
]);

function tlsCode(code: string | undefined): boolean {
  return (
    code !== undefined &&
    (code.includes("CERT") ||
      code.includes("SELF_SIGNED") ||
      code === "UNABLE_TO_VERIFY_LEAF_SIGNATURE" ||
      code === "ERR_TLS_CERT_ALTNAME_INVALID")
  );
}

function parseJson(text: string): unknown {
  if (!text) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A server-sent event's handler: its name and its data. */
export type EventHandler = (name: string, data: string) => void;

/** The nodes, their liveness, and requests with retries (module doc). */
export class Transport {
  readonly nodes: Node[];
  private current_ = 0;
  private closed_ = false;
  private readonly agent: http.Agent;
  private readonly headers: Record<string, string>;
  /** Aborted by close(): ends every request, stream and probe. */
  private readonly closing = new AbortController();

  constructor(
    settings: Settings,
    readonly requestDeadlineMs: number = REQUEST_DEADLINE_MS,
    /** The client's own account (`ClientOptions.log`). */
    readonly log: (message: string) => void = () => undefined,
  ) {
    this.nodes = settings.urls.map((u, i) => new Node(u, i));
    this.headers = { "user-agent": `weir-typescript/${VERSION}`, accept: "application/json" };
    if (settings.token) this.headers["authorization"] = `Bearer ${settings.token}`;
    // Every request, a session's above all, speaks to the client's group.
    if (settings.group !== null) this.headers["weir-group"] = String(settings.group);
    const options = { keepAlive: true, maxSockets: Infinity, maxFreeSockets: 64 };
    this.agent =
      settings.caPem !== null || settings.urls.some((u) => u.startsWith("https:"))
        ? new https.Agent({ ...options, ...(settings.caPem !== null ? { ca: settings.caPem } : {}) })
        : new http.Agent(options);
  }

  get closed(): boolean {
    return this.closed_;
  }

  get current(): Node {
    return this.nodes[this.current_] as Node;
  }

  /** The node to ask now: the current one, or the next not suspected. */
  pick(): Node {
    const now = performance.now();
    const n = this.nodes.length;
    for (let k = 0; k < n; k++) {
      const node = this.nodes[(this.current_ + k) % n] as Node;
      if (!node.suspected(now)) {
        this.current_ = node.index;
        return node;
      }
    }
    return this.current;
  }

  /** The next request goes elsewhere than `node`. */
  moveOn(node: Node): void {
    if (this.current_ === node.index) this.current_ = (node.index + 1) % this.nodes.length;
  }

  suspect(node: Node): void {
    node.suspectUntil = performance.now() + SUSPECT_FOR_MS;
    this.moveOn(node);
    this.log(`${node.url} fell silent; passed over for ${SUSPECT_FOR_MS} ms`);
  }

  // -- one exchange ----------------------------------------------------------------------

  private enter(node: Node): void {
    node.users += 1;
    if (!node.probing) {
      node.probing = true;
      void this.probeLoop(node);
    }
  }

  private leave(node: Node): void {
    node.users -= 1;
  }

  private async probeLoop(node: Node): Promise<void> {
    try {
      while (node.users > 0 && !this.closed_) {
        try {
          const answer = await this.exchange(node, "GET", "/healthz", undefined, undefined, PROBE_TIMEOUT_MS);
          if (answer.status < 500) node.heard();
        } catch {
          // A probe that fails says nothing new: silence is judged by time.
        }
        await sleep(PROBE_EVERY_MS, this.closing.signal).catch(() => undefined);
      }
    } finally {
      node.probing = false;
    }
  }

  /**
   * One HTTP exchange with `node`: the answer, or a {@link TryFailed}. `onChunk`, when
   * given, takes the body as it arrives (an event stream) and the exchange ends with the
   * stream; otherwise the body is read whole and parsed as JSON.
   */
  private exchange(
    node: Node,
    method: string,
    path: string,
    body: unknown,
    signal: AbortSignal | undefined,
    timeoutMs: number,
    stream?: { onOpen: (status: number) => boolean; onChunk: (text: string) => void },
  ): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const headers: Record<string, string> = { ...this.headers };
      if (payload !== undefined) {
        headers["content-type"] = "application/json";
        headers["content-length"] = String(payload.length);
      }
      if (stream) headers["accept"] = "text/event-stream";
      const url = new URL(node.url + path);
      const mod = url.protocol === "https:" ? https : http;
      let connected = false;
      let settled = false;
      const finish = (err: TryFailed | null, answer?: Answer): void => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
        signal?.removeEventListener("abort", onAbort);
        if (err) {
          req.destroy();
          reject(err);
        } else {
          resolve(answer as Answer);
        }
      };
      const req = mod.request(url, { method, headers, agent: this.agent });
      const onAbort = (): void => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
        req.destroy();
        reject(signal?.reason);
      };
      if (signal?.aborted) {
        onAbort();
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      const connectTimer = setTimeout(() => {
        if (!connected) finish(new TryFailed("connect", `${node.url}: connect timed out`));
      }, CONNECT_TIMEOUT_MS);
      const answerTimer = stream
        ? undefined
        : setTimeout(() => finish(new TryFailed("broken", `${node.url}: no answer in ${timeoutMs} ms`)), timeoutMs);
      req.on("socket", (socket) => {
        const up = (): void => {
          connected = true;
        };
        if (!socket.connecting) up();
        else socket.once(url.protocol === "https:" ? "secureConnect" : "connect", up);
      });
      req.on("error", (e: NodeJS.ErrnoException) => {
        if (tlsCode(e.code)) {
          finish(new TryFailed("tls", `${node.url}: TLS verification failed: ${e.message}`));
        } else if (!connected && CONNECT_CODES.has(e.code ?? "")) {
          finish(new TryFailed("connect", `${node.url}: ${e.message}`));
        } else {
          finish(
            new TryFailed(
              connected ? "broken" : "connect",
              `${node.url}: ${e.message} (is this the node's HTTP port, http_listen? Over TLS, is the CA given?)`,
            ),
          );
        }
      });
      req.on("response", (res) => {
        connected = true;
        node.heard();
        const retryAfter = (res.headers["retry-after"] as string | undefined) ?? null;
        const status = res.statusCode ?? 0;
        res.setEncoding("utf8");
        if (stream && stream.onOpen(status)) {
          res.on("data", (chunk: string) => {
            node.heard();
            stream.onChunk(chunk);
          });
          res.on("end", () => finish(null, { status, retryAfter, json: null }));
          res.on("error", (e) => finish(new TryFailed("broken", `${node.url}: ${e.message}`)));
          return;
        }
        let text = "";
        res.on("data", (chunk: string) => {
          text += chunk;
          if (text.length > ANSWER_BYTES_MAX) {
            finish(new TryFailed("broken", `${node.url}: answer above ${ANSWER_BYTES_MAX} bytes`));
          }
        });
        res.on("end", () => {
          const json = parseJson(text);
          if (json === undefined && status < 400) {
            reject(new ProtocolError(`${node.url}${path}: answer is not JSON`));
            settled = true;
            clearTimeout(connectTimer);
            clearTimeout(answerTimer);
            return;
          }
          finish(null, { status, retryAfter, json: json ?? null });
        });
        res.on("error", (e) => finish(new TryFailed("broken", `${node.url}: ${e.message}`)));
      });
      req.end(payload);
    });
  }

  /** Runs one exchange on `node`, given up (a "silent" TryFailed) if the node falls
   * silent: heard from neither by the exchange nor by a probe for SILENCE_MAX_MS. */
  private async watched<T>(node: Node, work: (signal: AbortSignal) => Promise<T>, outer?: AbortSignal): Promise<T> {
    const ctl = new AbortController();
    const start = performance.now();
    const silent = new TryFailed("silent", `${node.url} fell silent for ${SILENCE_MAX_MS} ms`);
    const onOuter = (): void => ctl.abort(outer?.reason);
    if (outer?.aborted) throw outer.reason;
    outer?.addEventListener("abort", onOuter, { once: true });
    this.closing.signal.addEventListener("abort", onOuter, { once: true });
    this.enter(node);
    const timer = setInterval(() => {
      if (performance.now() - Math.max(node.lastHeard, start) > SILENCE_MAX_MS) {
        this.suspect(node);
        ctl.abort(silent);
      }
    }, SILENCE_CHECK_MS);
    try {
      return await work(ctl.signal);
    } catch (e) {
      if (ctl.signal.aborted && ctl.signal.reason === silent) throw silent;
      if (this.closed_ && !(e instanceof TryFailed)) throw new Unavailable("the client is closed");
      throw e;
    } finally {
      clearInterval(timer);
      outer?.removeEventListener("abort", onOuter);
      this.closing.signal.removeEventListener("abort", onOuter);
      this.leave(node);
    }
  }

  // -- requests --------------------------------------------------------------------------

  /** Sends one request to the cluster with retries; answers the JSON of a 2xx, throws the
   * typed error of any other (module doc). `signal` gives the request up. */
  async call(
    method: string,
    path: string,
    body?: unknown,
    options: { deadlineMs?: number; signal?: AbortSignal } = {},
  ): Promise<unknown> {
    const write = method !== "GET";
    const started = performance.now();
    const limit = options.deadlineMs ?? this.requestDeadlineMs;
    let maybeApplied = false;
    let last: WeirError | null = null;
    let connectsFailed = 0;
    const signal = options.signal;
    for (let attempt = 0; attempt < ATTEMPTS_MAX; attempt++) {
      if (this.closed_) throw new Unavailable("the client is closed");
      if (signal?.aborted) throw signal.reason;
      if (performance.now() - started > limit) break;
      const node = this.pick();
      let answer: Answer;
      try {
        answer = await this.watched(
          node,
          (s) => this.exchange(node, method, path, body, s, RESPONSE_TIMEOUT_MS),
          signal,
        );
      } catch (e) {
        if (!(e instanceof TryFailed)) throw e;
        if (e.kind === "tls") throw new TlsUntrusted(e.message);
        last = new Unavailable(e.message);
        if (e.kind === "connect") {
          this.moveOn(node);
          connectsFailed += 1;
          if (connectsFailed % this.nodes.length === 0) await sleep(jittered(RETRY_PAUSE_MS), signal);
        } else {
          maybeApplied ||= write;
          this.moveOn(node);
        }
        continue;
      }
      node.heard();
      if (answer.status === 503) {
        const err = fromResponse(answer.status, answer.json);
        maybeApplied ||= write && err instanceof OutcomeUnknown;
        last = err;
        this.moveOn(node);
        await sleep(jittered(RETRY_PAUSE_MS), signal);
        continue;
      }
      if (answer.status >= 400) throw fromResponse(answer.status, answer.json, answer.retryAfter);
      return answer.json;
    }
    const why = last !== null ? last.message : `none of ${this.nodes.map((n) => n.url).join(", ")}`;
    if (maybeApplied && write) throw new OutcomeUnknown(`${method} ${path}: may have been applied: ${why}`);
    if (last !== null) throw last;
    throw new Unavailable(why);
  }

  /** Sends an idempotent request to the nodes other than the current one, in turn; the
   * node that answers committed it, so it leads: it becomes the current one, and the one
   * that did not answer is passed over for SUSPECT_FOR_MS. */
  async hedge(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<unknown> {
    const avoid = this.current;
    const others = this.nodes.filter((n) => n !== avoid);
    if (others.length === 0) throw new Unavailable("no other node to hedge to");
    let last: WeirError = new Unavailable("no other node answered the hedge");
    for (let attempt = 0; attempt < HEDGE_TRIES; attempt++) {
      if (this.closed_) throw new Unavailable("the client is closed");
      const node = others[attempt % others.length] as Node;
      let answer: Answer;
      try {
        answer = await this.watched(
          node,
          (s) => this.exchange(node, method, path, body, s, RESPONSE_TIMEOUT_MS),
          signal,
        );
      } catch (e) {
        if (!(e instanceof TryFailed)) throw e;
        last = new Unavailable(e.message);
        if (e.kind !== "silent" && (attempt + 1) % others.length === 0) {
          await sleep(jittered(RETRY_PAUSE_MS), signal);
        }
        continue;
      }
      node.heard();
      if (answer.status === 503) {
        last = fromResponse(answer.status, answer.json);
        await sleep(jittered(RETRY_PAUSE_MS), signal);
        continue;
      }
      if (answer.status >= 400) throw fromResponse(answer.status, answer.json, answer.retryAfter);
      if (this.current === avoid) {
        avoid.suspectUntil = performance.now() + SUSPECT_FOR_MS;
        this.current_ = node.index;
        this.log(`hedged ${path} answered by ${node.url}; moving there`);
      }
      return answer.json;
    }
    throw last;
  }

  /**
   * Follows the server-sent events at `path` on the current node until the stream ends.
   * `onOpen` runs once the node answered 200 (the server subscribes before it answers, so
   * no event after that is missed); `onEvent(name, data)` per event. Throws Unavailable
   * when the node cannot be reached or falls silent, and the typed error of an error
   * answer.
   */
  async stream(path: string, onOpen: () => void, onEvent: EventHandler, signal?: AbortSignal): Promise<void> {
    if (this.closed_) throw new Unavailable("the client is closed");
    const node = this.pick();
    let line = "";
    let name = "message";
    let data: string[] = [];
    const takeLine = (text: string): void => {
      if (text === "") {
        if (data.length > 0) onEvent(name, data.join("\n"));
        name = "message";
        data = [];
        return;
      }
      if (text.startsWith(":")) return;
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    };
    let answer: Answer;
    try {
      answer = await this.watched(
        node,
        (s) =>
          this.exchange(node, "GET", path, undefined, s, RESPONSE_TIMEOUT_MS, {
            onOpen: (status) => {
              if (status !== 200) return false;
              onOpen();
              return true;
            },
            onChunk: (chunk) => {
              line += chunk;
              let nl: number;
              while ((nl = line.indexOf("\n")) >= 0) {
                takeLine(line.slice(0, nl).replace(/\r$/, ""));
                line = line.slice(nl + 1);
              }
              if (line.length > EVENT_LINE_BYTES_MAX) line = "";
            },
          }),
        signal,
      );
    } catch (e) {
      if (!(e instanceof TryFailed)) throw e;
      if (e.kind === "tls") throw new TlsUntrusted(e.message);
      this.moveOn(node);
      throw new Unavailable(e.message);
    }
    if (answer.status >= 400) {
      const err = fromResponse(answer.status, answer.json);
      if (err instanceof Unavailable) this.moveOn(node);
      throw err;
    }
  }

  /** Ends every request, stream and probe, and the connections. */
  close(): void {
    this.closed_ = true;
    this.closing.abort(new Unavailable("the client is closed"));
    this.agent.destroy();
  }
}
