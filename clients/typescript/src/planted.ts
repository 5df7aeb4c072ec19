/**
 * Planted bugs: negative controls for the partition harness (`jepsen/planted.sh`), the
 * TypeScript side of `crates/weir-core/src/planted.rs`.
 *
 * A plant is on only when Node was started with `--conditions=weir-planted` and
 * `WEIR_PLANT` names one of {@link PLANTS}: an application never passes that condition,
 * and the harness passes it only when it is itself a planted build. Otherwise
 * {@link plantedOn} answers false and every plant's branch is dead. Other names in
 * `WEIR_PLANT` are plants of the Rust side or of other clients and leave this one as it is.
 *
 * Invariants: at most one plant is on in a process, read once at load; each plant is one
 * small branch marked `// PLANTED(<name>)` at the exact spot of the bug.
 */

/** The plants whose branches are in this client. */
export const PLANTS: ReadonlySet<string> = new Set(["ts-told-late"]);

const ACTIVE: string | null = (() => {
  if (!process.execArgv.includes("--conditions=weir-planted")) return null;
  const name = process.env["WEIR_PLANT"];
  return name !== undefined && PLANTS.has(name) ? name : null;
})();

/** Whether the plant `name` is on in this process. */
export function plantedOn(name: string): boolean {
  return name === ACTIVE;
}
