// Package weir is the Go client of Weir, a replicated limit cluster: concurrency permits
// held as renewable leases with fences, rate-limit tokens, run slots and budgets, halts.
// It speaks the nodes' HTTP/JSON API (docs/openapi.yaml) with the standard library only.
//
// What it owns, file by file: transport.go, which node to ask and when a node is silent
// (the 1 s silence rule, retries, hedged copies); session.go, sessions kept alive in the
// background, the belief deadline (G2), acquires and their grants by push, permits;
// lease.go, token leases: takes decided from a local bucket while the session's belief holds;
// clock.go, the clock the deadline is kept on; client.go, the calls without a session;
// errors.go, every refusal and failure as a value for errors.Is and errors.As.
//
// Invariants: a permit is believed held (Permit.Err is nil, Permit.Lost open) only until
// the send time of the session's last acknowledged keep-alive plus the TTL, less a margin,
// and never again once lost; a ticket no caller holds a permit for is released; every
// write is idempotent (a keep-alive by its session, an acquire by its ticket, a release by
// its ticket, a lease request by its seq), so it may be sent again or to several nodes.
//
// It must never: extend a belief on a keep-alive that was not acknowledged, tell a caller
// a write failed when it may have been applied (that is ErrOutcomeUnknown), or panic on
// what a node sends.
package weir
