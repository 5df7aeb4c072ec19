package weir

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Each kind of refusal and failure is a sentinel: test with errors.Is(err, weir.ErrBusy),
// and read a refusal's fields with errors.As(err, &e) where e is a *weir.Error.
var (
	ErrBusy            = errors.New("weir: busy")
	ErrHalted          = errors.New("weir: halted")
	ErrUnknownLimit    = errors.New("weir: unknown limit")
	ErrUnknownSession  = errors.New("weir: unknown session")
	ErrTooLarge        = errors.New("weir: too large")
	ErrConflict        = errors.New("weir: conflict")
	ErrTooManyRuns     = errors.New("weir: too many runs")
	ErrBudgetExhausted = errors.New("weir: budget exhausted")
	ErrQueueFull       = errors.New("weir: queue full")
	ErrLimitRemoved    = errors.New("weir: limit removed")
	ErrTicketReleased  = errors.New("weir: ticket released")
	ErrInvalid         = errors.New("weir: invalid")
	ErrAtCapacity      = errors.New("weir: at capacity")
	ErrBadRequest      = errors.New("weir: bad request")
	ErrNotFound        = errors.New("weir: not found")
	// ErrUnauthenticated: no token, or one the cluster does not know (401).
	ErrUnauthenticated = errors.New("weir: unauthenticated")
	// ErrForbidden: the token's role may not do this (403).
	ErrForbidden = errors.New("weir: forbidden")
	// ErrNoLeader: no node could serve within the request's time (503 on every try).
	ErrNoLeader = errors.New("weir: no leader")
	// ErrUnavailable: no node was reached; nothing was applied.
	ErrUnavailable = errors.New("weir: unavailable")
	// ErrOutcomeUnknown: a write may or may not have been applied.
	ErrOutcomeUnknown = errors.New("weir: outcome unknown")
	// ErrUntrusted: the server's TLS certificate is not signed by the configured CA.
	ErrUntrusted = errors.New("weir: server certificate not trusted")
	// ErrTimedOut: an acquire's context ended while its ticket waited (the ticket is
	// withdrawn). Such an error also matches the context's own error.
	ErrTimedOut = errors.New("weir: timed out")
	// ErrSessionEnded: the session is closed, expired or past its deadline.
	ErrSessionEnded = errors.New("weir: session ended")
	// ErrLost: a permit is no longer believed held (Permit.Err).
	ErrLost = errors.New("weir: permit lost")
	// ErrProtocol: the node answered something this client does not understand.
	ErrProtocol = errors.New("weir: protocol error")
	// ErrWrongGroup: on a cluster of several Raft groups, a session's request for a tenant
	// another group decides, or a placement in another group than the tenant's (421); the
	// Error's "group" field names the tenant's group (Config.Group).
	ErrWrongGroup = errors.New("weir: wrong group")
)

var kinds = map[string]error{
	"Busy": ErrBusy, "Halted": ErrHalted, "UnknownLimit": ErrUnknownLimit,
	"UnknownSession": ErrUnknownSession, "TooLarge": ErrTooLarge, "Conflict": ErrConflict,
	"TooManyRuns": ErrTooManyRuns, "BudgetExhausted": ErrBudgetExhausted,
	"QueueFull": ErrQueueFull, "LimitRemoved": ErrLimitRemoved,
	"TicketReleased": ErrTicketReleased, "Invalid": ErrInvalid, "AtCapacity": ErrAtCapacity,
	"BadRequest": ErrBadRequest, "NotFound": ErrNotFound, "NoLeader": ErrNoLeader,
	"Unavailable": ErrUnavailable, "OutcomeUnknown": ErrOutcomeUnknown,
	"Unauthenticated": ErrUnauthenticated, "Unauthorized": ErrUnauthenticated,
	"Forbidden": ErrForbidden, "WrongGroup": ErrWrongGroup,
}

// Error is a refusal or failure as the node named it: its name (Busy, Halted, ...), its
// text, the HTTP status and the refusal's fields (tenant, name, scope, reason, ...).
type Error struct {
	Name    string
	Message string
	Status  int
	// Fields holds every key of the error's JSON body.
	Fields map[string]any
	// RetryAfter is when a Busy refusal may succeed, when the node said (else 0).
	RetryAfter time.Duration
	kind       error
	cause      error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "weir: " + e.Name
	}
	return fmt.Sprintf("weir: %s: %s", e.Name, e.Message)
}

// Unwrap answers the sentinel of the error's kind.
func (e *Error) Unwrap() error { return e.kind }

// Is matches the error's kind and, for a timeout, the context's error it came from.
func (e *Error) Is(target error) bool {
	return target == e.kind || (e.cause != nil && errors.Is(e.cause, target))
}

// Field answers one of the refusal's string fields ("" when absent).
func (e *Error) Field(name string) string {
	if s, ok := e.Fields[name].(string); ok {
		return s
	}
	return ""
}

func newError(name, message string, status int, fields map[string]any) *Error {
	kind, ok := kinds[name]
	if !ok {
		switch {
		case status == 401:
			kind = ErrUnauthenticated
		case status == 403:
			kind = ErrForbidden
		default:
			kind = ErrProtocol
		}
	}
	e := &Error{Name: name, Message: message, Status: status, Fields: fields, kind: kind}
	if ms, ok := fields["retry_after_ms"].(float64); ok && ms > 0 {
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	return e
}

func failure(kind error, name, format string, args ...any) *Error {
	return &Error{Name: name, Message: fmt.Sprintf(format, args...), kind: kind}
}

func timedOut(ctx context.Context, what string) *Error {
	e := failure(ErrTimedOut, "TimedOut", "%s: still waiting when the context ended", what)
	e.cause = ctx.Err()
	return e
}

// LostKind says why a permit is no longer believed held.
type LostKind int

const (
	// LostDeadline: the session's belief deadline passed with no keep-alive acknowledged.
	LostDeadline LostKind = iota + 1
	// LostHalted: the permit's tenant or agent was halted; the permit stays held on the
	// cluster until released, but the work it guards should stop.
	LostHalted
	// LostExpired: the cluster expired the session.
	LostExpired
	// LostClosed: the session was closed.
	LostClosed
	// LostReleased: another permit of the same ticket (asked again with Ticket) was
	// released: the ticket is no longer held.
	LostReleased
)

func (k LostKind) String() string {
	switch k {
	case LostDeadline:
		return "deadline"
	case LostHalted:
		return "halted"
	case LostExpired:
		return "expired"
	case LostClosed:
		return "closed"
	case LostReleased:
		return "released"
	}
	return "unknown"
}

// LostError says why a permit is lost (Permit.Err); it matches ErrLost, and ErrHalted
// when a halt ended it.
type LostError struct {
	Kind LostKind
	// Scope and Reason name the halt (LostHalted only): scope "tenant" or "agent NAME".
	Scope, Reason string
}

func (e *LostError) Error() string {
	if e.Kind == LostHalted {
		return fmt.Sprintf("weir: permit lost: halted (%s): %s", e.Scope, e.Reason)
	}
	return "weir: permit lost: " + e.Kind.String()
}

// Is matches ErrLost, ErrHalted for a halt and ErrSessionEnded for a session's end.
func (e *LostError) Is(target error) bool {
	switch target {
	case ErrLost:
		return true
	case ErrHalted:
		return e.Kind == LostHalted
	case ErrSessionEnded:
		return e.Kind != LostHalted && e.Kind != LostReleased
	}
	return false
}
