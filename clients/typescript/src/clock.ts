/**
 * The clock the belief deadline is kept on, and the deadline arithmetic (G2).
 *
 * Which clock. Node's own clocks (`performance.now()`, `process.hrtime`, the timers) read
 * libuv's `uv_hrtime`, which is `CLOCK_MONOTONIC` on Linux: it does not count the time
 * the machine spends suspended. The cluster's clocks, and so the leases, go on during a
 * suspend, so a deadline on that clock alone would let a client that resumes believe in
 * permits whose lease ran out in real time. Node exposes no `CLOCK_BOOTTIME`; Linux shows
 * it in `/proc/uptime` (seconds since boot, suspend included, in hundredths). So
 * {@link bootNowMs} is the monotonic clock plus the time suspended since this module
 * loaded, measured as the growth of `/proc/uptime - monotonic`, rounded up, and never
 * moving backwards: a conservative reading of `CLOCK_BOOTTIME` at the monotonic clock's
 * resolution. Where `/proc/uptime` cannot be read (macOS, Windows) it is the monotonic
 * clock alone ({@link CLOCK_NAME} says which), with the caveat above.
 *
 * Timers only decide when to *look*: every decision compares against {@link bootNowMs},
 * and a wait on the deadline looks again at least every {@link LOOK_EVERY_MS}, so a
 * deadline that passed during a suspend is noticed within that long of resuming.
 *
 * The rules are the Rust library's and the Python client's:
 * - a session sends a keep-alive every TTL/5 ({@link KEEPALIVES_PER_TTL});
 * - the margin is a tenth of the TTL, at least 100 ms ({@link marginForMs});
 * - after a keep-alive (or the open) *sent* at `sent` is acknowledged, the belief deadline
 *   becomes `sent + TTL - margin` ({@link deadlineAfterMs}), and only ever moves later.
 */

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

/** Longest a wait on the belief deadline sleeps before it looks at the clock again (ms). */
export const LOOK_EVERY_MS = 250;

/** Keep-alives sent per TTL. */
export const KEEPALIVES_PER_TTL = 5;

/** `/proc/uptime` counts hundredths of a second: its reading may be this much behind. */
const UPTIME_RESOLUTION_MS = 10;

function uptimeMs(): number | null {
  try {
    const text = readFileSync("/proc/uptime", "ascii");
    const seconds = Number.parseFloat(text.split(" ")[0] ?? "");
    return Number.isFinite(seconds) ? seconds * 1000 : null;
  } catch {
    return null;
  }
}

/** `/proc/uptime - monotonic` when this module loaded (ms), or null without /proc/uptime. */
const offsetAtLoadMs: number | null = (() => {
  const before = performance.now();
  const up = uptimeMs();
  return up === null ? null : up - before;
})();

/** Which clock {@link bootNowMs} reads. */
export const CLOCK_NAME: "CLOCK_BOOTTIME (/proc/uptime)" | "monotonic" =
  offsetAtLoadMs === null ? "monotonic" : "CLOCK_BOOTTIME (/proc/uptime)";

let lastMs = 0;

/**
 * Milliseconds on the boot clock (module doc): counts suspended time where the platform
 * shows it; never moves backwards.
 */
export function bootNowMs(): number {
  const mono = performance.now();
  let now = mono;
  if (offsetAtLoadMs !== null) {
    const up = uptimeMs();
    if (up !== null) {
      // Suspended since load: how much the uptime ran ahead of the monotonic clock, read
      // high by the uptime's resolution (at most 20 ms over, never under), so a deadline
      // is never judged later than it is.
      const suspended = up + UPTIME_RESOLUTION_MS - mono - offsetAtLoadMs;
      if (suspended > 0) now = mono + suspended;
    }
  }
  if (now < lastMs) now = lastMs;
  lastMs = now;
  return now;
}

/**
 * The safety margin subtracted from the TTL (ms): a tenth of the TTL, at least 100 ms. It
 * covers a clock-rate drift between this client and the leaders far larger than
 * NTP-disciplined clocks show.
 */
export function marginForMs(ttlMs: number): number {
  return Math.max(ttlMs / 10, 100);
}

/**
 * The belief deadline after a keep-alive (or open) sent at `sentMs` (on
 * {@link bootNowMs}) was acknowledged: the cluster cannot expire the session before
 * `sentMs + ttlMs`, less the margin.
 */
export function deadlineAfterMs(sentMs: number, ttlMs: number): number {
  return sentMs + ttlMs - marginForMs(ttlMs);
}
