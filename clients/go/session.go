package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sessions and permits.
//
// A session sends a keep-alive every TTL/5 from a goroutine of its own. When one is
// acknowledged, the session's belief deadline becomes send time + TTL - margin (margin: a
// tenth of the TTL, at least 100 ms) on bootNow's clock (clock.go). The cluster cannot
// expire the session before send time + TTL, so every permit of the session is believed
// held only until that deadline. A keep-alive with no acknowledgement leaves the deadline
// where it was and is tried again after 100 ms. A second goroutine watches the deadline
// on its own (a keep-alive stuck on a silent node never delays it): once the deadline
// passes, every held permit is lost (LostDeadline) and stays lost. A keep-alive answered
// UnknownSession ends the session (LostExpired).
//
// A keep-alive or an acquire unanswered for hedgeAfter while less than hedgeWhenLeft of
// the belief is left is hedged: sent to the other nodes too; the first answer wins. Both
// are idempotent (a keep-alive by its session, an acquire by its ticket).
//
// Grants, refusals and halts arrive on the session's event stream, followed by a third
// goroutine. An acquire registers its ticket as waiting before it is sent, then sends it
// with timeout_ms 0: answered granted it is a permit at once; answered queued, its outcome
// comes on the stream. Each time the stream (re)connects, or the node says it lagged, every
// waiting ticket is asked again with the very same request, and the halts of every tenant
// the session holds permits of are read, so an event lost is learned anyway.
//
// A caller may ask again itself for a ticket the session holds (Ticket): the cluster
// answers the same grant, and the new permit joins the held one (Permit.twins), so the two
// are one holding: a loss of either (a halt, the deadline, the session's end) is a loss of
// both, and releasing either releases the ticket and tells the others LostReleased. No
// permit is believed held on a ticket another one released.
//
// Nothing stays held that no one believes it holds: a ticket whose acquire gave up (its
// context ended, its outcome unknown) is released, and a release whose outcome is unknown
// is retried every second until known or until the session ends.

const (
	keepaliveRetry = 100 * time.Millisecond
	hedgeLook      = 50 * time.Millisecond
	hedgeWhenLeft  = 1600 * time.Millisecond
	hedgeAfter     = 400 * time.Millisecond
	releasePause   = time.Second
	streamPause    = 200 * time.Millisecond
)

// SessionOptions shapes a session; TTL 0 is 3 s.
type SessionOptions struct {
	TTL time.Duration
}

// Session is a client's identity on the cluster, kept alive in the background until
// Close. Its permits are believed held until its belief deadline (see Permit.Lost).
type Session struct {
	c   *Client
	id  uint64
	ttl time.Duration

	ctx    context.Context // ends when the session does
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	deadline   time.Duration // bootNow() reading
	ended      *LostError
	nextTicket uint64
	waiting    map[uint64]*waiter
	held       map[uint64]*Permit
	reask      chan struct{}
	streamUp   bool

	// leaseMu keeps the session's lease requests one at a time, numbered by leaseSeq
	// (lease.go).
	leaseMu  sync.Mutex
	leaseSeq uint64
}

type grant struct {
	fence uint64
	units uint64
}

type waiter struct {
	path   string
	body   map[string]any
	tenant string
	agent  string
	done   chan struct{} // closed once grant or err is set
	grant  *grant
	err    error
	lost   *LostError
}

// finish sets the waiter's outcome once (callers hold the session's mutex).
func (w *waiter) finish(g *grant, err error) bool {
	select {
	case <-w.done:
		return false
	default:
	}
	w.grant, w.err = g, err
	close(w.done)
	return true
}

// OpenSession opens a session and starts keeping it alive.
func (c *Client) OpenSession(ctx context.Context, o SessionOptions) (*Session, error) {
	ttl := o.TTL
	if ttl == 0 {
		ttl = 3 * time.Second
	}
	sent := bootNow()
	var out struct {
		Session uint64 `json:"session"`
		TTLMs   uint64 `json:"ttl_ms"`
	}
	if err := c.t.call(ctx, "POST", "/v1/sessions", map[string]any{"ttl_ms": ttl.Milliseconds()}, &out); err != nil {
		return nil, err
	}
	if out.Session == 0 {
		return nil, failure(ErrProtocol, "Protocol", "open answered no session")
	}
	if out.TTLMs > 0 {
		ttl = time.Duration(out.TTLMs) * time.Millisecond
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		c: c, id: out.Session, ttl: ttl, ctx: sctx, cancel: cancel,
		deadline: deadlineAfter(sent, ttl), nextTicket: 1,
		waiting: map[uint64]*waiter{}, held: map[uint64]*Permit{},
		reask: make(chan struct{}, 1),
	}
	s.wg.Add(3)
	go s.renew()
	go s.watchDeadline()
	go s.follow()
	return s, nil
}

// ID answers the session's id.
func (s *Session) ID() uint64 { return s.id }

// TTL answers the session's TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// DeadlineLeft answers how long the session's permits are still believed held without a
// further keep-alive acknowledged (negative once passed).
func (s *Session) DeadlineLeft() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline - bootNow()
}

// Err answers why the session ended, or nil while it lives.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended == nil {
		return nil
	}
	return s.ended
}

// -- acquire ----------------------------------------------------------------------------

// AcquireOption shapes an acquire.
type AcquireOption func(*acquireRequest)

type acquireRequest struct {
	tenant      string
	key         string
	units       uint32
	parts       []Part
	priority    int32
	fairnessKey string
	weight      uint32
	agent       string
	wait        bool
	estimate    bool
	ticket      uint64
}

// Units asks for n units (default 1).
func Units(n uint32) AcquireOption { return func(r *acquireRequest) { r.units = n } }

// Key names the key of a keyed limit.
func Key(key string) AcquireOption { return func(r *acquireRequest) { r.key = key } }

// Parts adds more limits of the tenant: all granted under one fence, or none charged.
func Parts(parts ...Part) AcquireOption {
	return func(r *acquireRequest) { r.parts = append(r.parts, parts...) }
}

// Priority sets the level (higher first).
func Priority(level int32) AcquireOption { return func(r *acquireRequest) { r.priority = level } }

// Fairness sets the ticket's fair-share key and weight within its level.
func Fairness(key string, weight uint32) AcquireOption {
	return func(r *acquireRequest) { r.fairnessKey, r.weight = key, weight }
}

// Agent names the acting agent (an agent halt covers it).
func Agent(agent string) AcquireOption { return func(r *acquireRequest) { r.agent = agent } }

// NoWait refuses at once with ErrBusy when there is no room, instead of queueing.
func NoWait() AcquireOption { return func(r *acquireRequest) { r.wait = false } }

// Estimate marks the rate parts' units as an estimate, settled with Permit.Settle.
func Estimate() AcquireOption { return func(r *acquireRequest) { r.estimate = true } }

// InTenant acquires in another tenant than the client's.
func InTenant(tenant string) AcquireOption { return func(r *acquireRequest) { r.tenant = tenant } }

// Ticket asks with a ticket number of the caller's choosing instead of the session's next
// one. Asking again with the same ticket is idempotent: it answers the same grant, the same
// fence, charging nothing twice. Asked again while this session holds it, the two permits
// are one holding: a halt, the deadline or the session's end tells both, and releasing
// either releases the ticket and tells the other LostReleased. The session numbers its own
// tickets 1, 2, 3, ...: choose numbers far from them.
func Ticket(n uint64) AcquireOption { return func(r *acquireRequest) { r.ticket = n } }

func (r *acquireRequest) body(session, ticket uint64) map[string]any {
	b := map[string]any{"session": session, "ticket": ticket, "wait": r.wait, "timeout_ms": 0}
	if r.key != "" {
		b["key"] = r.key
	}
	if r.units > 0 {
		b["units"] = r.units
	}
	if len(r.parts) > 0 {
		b["parts"] = r.parts
	}
	if r.priority != 0 {
		b["priority"] = r.priority
	}
	if r.fairnessKey != "" {
		b["fairness_key"] = r.fairnessKey
	}
	if r.weight > 0 {
		b["weight"] = r.weight
	}
	if r.agent != "" {
		b["agent"] = r.agent
	}
	if r.estimate {
		b["estimate"] = true
	}
	return b
}

// Acquire asks for a permit of limit and waits until it is granted, refused (an *Error
// matching ErrBusy, ErrHalted, ErrTooLarge, ErrUnknownLimit, ...), or ctx ends (an error
// matching ErrTimedOut and ctx.Err(); the ticket is withdrawn). A grant that arrives while
// the context ends is released: nothing stays held that no one holds.
func (s *Session) Acquire(ctx context.Context, limit string, opts ...AcquireOption) (*Permit, error) {
	r := acquireRequest{tenant: s.c.tenant, wait: true}
	for _, o := range opts {
		o(&r)
	}
	s.mu.Lock()
	if s.ended != nil {
		err := s.ended
		s.mu.Unlock()
		return nil, fmt.Errorf("weir: session %d: %w", s.id, err)
	}
	if _, held := s.held[r.ticket]; held && r.ticket != 0 {
		s.mu.Unlock()
		return s.askAgain(ctx, limit, r)
	}
	ticket := r.ticket
	if ticket == 0 {
		ticket = s.nextTicket
		s.nextTicket++
	}
	w := &waiter{
		path:   "/v1/tenants/" + q(r.tenant) + "/limits/" + q(limit) + "/acquire",
		body:   r.body(s.id, ticket),
		tenant: r.tenant, agent: r.agent, done: make(chan struct{}),
	}
	// Registered before it is sent: a grant on the stream ahead of the answer finds it.
	s.waiting[ticket] = w
	s.mu.Unlock()

	var answer acquireAnswer
	err := s.hedged(ctx, "POST", w.path, w.body, &answer)
	switch {
	case err == nil:
		s.answered(ticket, answer)
	case isRefusal(err):
		s.refused(ticket, err)
	default:
		s.mu.Lock()
		if s.waiting[ticket] == w {
			delete(s.waiting, ticket)
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			s.releaseInBackground(ticket, false)
			return nil, timedOut(ctx, limit)
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			s.releaseInBackground(ticket, false)
		}
		return nil, err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		// Granted meanwhile or not, the ticket is released: no one holds it.
		s.mu.Lock()
		w.finish(nil, timedOut(ctx, limit))
		if s.waiting[ticket] == w {
			delete(s.waiting, ticket)
		}
		s.mu.Unlock()
		s.withdraw(ticket)
		return nil, timedOut(ctx, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	p := &Permit{
		s: s, ticket: ticket, tenant: r.tenant, limit: limit, agent: r.agent,
		fence: w.grant.fence, units: w.grant.units, lost: make(chan struct{}),
	}
	s.held[ticket] = p
	switch {
	case s.ended != nil:
		p.setLost(s.ended)
	case w.lost != nil:
		p.setLost(w.lost)
	case bootNow() >= s.toldAt():
		p.setLost(&LostError{Kind: LostDeadline})
	}
	return p, nil
}

// askAgain asks again for r.ticket, which this session holds: the cluster answers its
// grant (idempotent by session and ticket), and the new permit joins the held one's
// holding (Permit.twins). Nothing is registered, so a failure leaves the ticket with the
// permit that holds it.
func (s *Session) askAgain(ctx context.Context, limit string, r acquireRequest) (*Permit, error) {
	path := "/v1/tenants/" + q(r.tenant) + "/limits/" + q(limit) + "/acquire"
	var answer acquireAnswer
	if err := s.hedged(ctx, "POST", path, r.body(s.id, r.ticket), &answer); err != nil {
		if ctx.Err() != nil {
			return nil, timedOut(ctx, limit)
		}
		return nil, err
	}
	if answer.Status != "granted" {
		return nil, failure(ErrProtocol, "Protocol", "unexpected answer to a held ticket: %q", answer.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first, held := s.held[r.ticket]
	if !held {
		// Released meanwhile through its other permit: the grant answered is held no more.
		return nil, failure(ErrTicketReleased, "TicketReleased", "ticket %d of session %d was released meanwhile", r.ticket, s.id)
	}
	units := answer.Units
	if units == 0 {
		units = 1
	}
	p := &Permit{
		s: s, ticket: r.ticket, tenant: r.tenant, limit: limit, agent: r.agent,
		fence: answer.Fence, units: units, lost: make(chan struct{}),
	}
	first.twins = append(first.twins, p)
	if first.lostErr != nil {
		p.markLost(first.lostErr)
	}
	return p, nil
}

type acquireAnswer struct {
	Status   string `json:"status"`
	Fence    uint64 `json:"fence"`
	Units    uint64 `json:"units"`
	Position uint64 `json:"position"`
}

func isRefusal(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Status >= 400 && e.Status < 500
}

func (s *Session) answered(ticket uint64, a acquireAnswer) {
	switch a.Status {
	case "granted":
		s.granted(ticket, a.Fence, a.Units)
	case "queued":
	default:
		s.refused(ticket, failure(ErrProtocol, "Protocol", "unexpected answer to an acquire: %q", a.Status))
	}
}

func (s *Session) granted(ticket, fence, units uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.waiting[ticket]
	if !ok {
		return
	}
	delete(s.waiting, ticket)
	if units == 0 {
		units = 1
	}
	w.finish(&grant{fence, units}, nil)
}

func (s *Session) refused(ticket uint64, err error) {
	if errors.Is(err, ErrUnknownSession) {
		s.end(&LostError{Kind: LostExpired})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.waiting[ticket]; ok {
		delete(s.waiting, ticket)
		w.finish(nil, err)
	}
}

// lose marks one ticket's permit (or its grant to come) lost.
func (s *Session) lose(ticket uint64, why *LostError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.held[ticket]; ok {
		p.setLost(why)
		return
	}
	if w, ok := s.waiting[ticket]; ok && w.lost == nil {
		w.lost = why
	}
}

// end ends the session: every permit lost, every waiting acquire failed.
func (s *Session) end(why *LostError) {
	s.mu.Lock()
	if s.ended != nil {
		s.mu.Unlock()
		return
	}
	s.ended = why
	for _, p := range s.held {
		p.setLost(why)
	}
	s.held = map[uint64]*Permit{}
	for _, w := range s.waiting {
		w.finish(nil, fmt.Errorf("weir: session %d: %w", s.id, why))
	}
	s.waiting = map[uint64]*waiter{}
	s.mu.Unlock()
	s.cancel()
}

// forget stops tracking p's ticket (p is being released). Any other permit of the ticket
// (asked again) not lost already is told LostReleased.
func (s *Session) forget(ticket uint64, p *Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok := s.held[ticket]
	if !ok {
		return
	}
	holding := append([]*Permit{first}, first.twins...)
	mine := false
	for _, each := range holding {
		mine = mine || each == p
	}
	if !mine {
		return
	}
	delete(s.held, ticket)
	first.twins = nil // so that telling first does not tell p
	for _, other := range holding {
		if other != p {
			other.setLost(&LostError{Kind: LostReleased})
		}
	}
}

func (s *Session) withdraw(ticket uint64) {
	ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
	defer cancel()
	err := s.c.t.call(ctx, "POST", fmt.Sprintf("/v1/sessions/%d/release", s.id), map[string]any{"ticket": ticket}, nil)
	if err != nil && !isRefusal(err) {
		s.releaseInBackground(ticket, true)
	}
}

func (s *Session) releaseInBackground(ticket uint64, pauseFirst bool) {
	go func() {
		for attempt := 0; ; attempt++ {
			if attempt > 0 || pauseFirst {
				if sleepCtx(s.ctx, jittered(releasePause)) != nil {
					return // closed or expired: its end freed the ticket
				}
			}
			ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
			err := s.c.t.call(ctx, "POST", fmt.Sprintf("/v1/sessions/%d/release", s.id), map[string]any{"ticket": ticket}, nil)
			cancel()
			if err == nil || isRefusal(err) || s.ctx.Err() != nil {
				return
			}
		}
	}()
}

// hedged sends an idempotent write of this session (a keep-alive, an acquire) to the
// current node, hedged to the others once unanswered for hedgeAfter with less than
// hedgeWhenLeft of the belief left (the file comment): the first answer wins.
func (s *Session) hedged(ctx context.Context, method, path string, body map[string]any, out any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	type result struct {
		raw json.RawMessage
		err error
	}
	primary := make(chan result, 1)
	go func() {
		var raw json.RawMessage
		err := s.c.t.call(ctx, method, path, body, &raw)
		primary <- result{raw, err}
	}()
	sent := time.Now()
	look := time.NewTicker(hedgeLook)
	defer look.Stop()
	decode := func(r result) error {
		if r.err != nil {
			return r.err
		}
		if out != nil && len(r.raw) > 0 {
			return json.Unmarshal(r.raw, out)
		}
		return nil
	}
	for {
		select {
		case r := <-primary:
			return decode(r)
		case <-look.C:
		}
		if len(s.c.t.nodes) > 1 && time.Since(sent) >= hedgeAfter && s.DeadlineLeft() < hedgeWhenLeft {
			break
		}
	}
	hedge := make(chan result, 1)
	go func() {
		var raw json.RawMessage
		err := s.c.t.hedge(ctx, method, path, payload, &raw)
		hedge <- result{raw, err}
	}()
	select {
	case r := <-primary:
		return decode(r)
	case r := <-hedge:
		if r.err == nil || isRefusal(r.err) {
			return decode(r)
		}
		return decode(<-primary)
	}
}

// -- background work --------------------------------------------------------------------

// renew sends a keep-alive every TTL/5 (sooner after one that was not acknowledged).
func (s *Session) renew() {
	defer s.wg.Done()
	every := s.ttl / keepalivesPerTTL
	for {
		if sleepCtx(s.ctx, every) != nil {
			return
		}
		for !s.keepAlive(every) {
			if sleepCtx(s.ctx, keepaliveRetry) != nil {
				return
			}
		}
	}
}

// keepAlive sends one keep-alive and answers whether it was acknowledged (or the session
// ended).
func (s *Session) keepAlive(every time.Duration) bool {
	ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
	defer cancel()
	sent := bootNow()
	var answer struct {
		Status string `json:"status"`
	}
	err := s.hedged(ctx, "POST", fmt.Sprintf("/v1/sessions/%d/keepalive", s.id), map[string]any{}, &answer)
	if errors.Is(err, ErrUnknownSession) {
		s.end(&LostError{Kind: LostExpired})
		return true
	}
	if err != nil || answer.Status != "kept_alive" {
		return s.ctx.Err() != nil
	}
	s.extend(sent)
	return true
}

func (s *Session) extend(sent time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := deadlineAfter(sent, s.ttl); d > s.deadline {
		s.deadline = d
	}
}

// toldAt is when the application is told that the belief deadline passed (Permit.Lost,
// Permit.Err): at the deadline itself (callers hold s.mu).
func (s *Session) toldAt() time.Duration {
	// PLANTED(go-told-late): the application is told 3 s after the deadline.
	if plantedActive == "go-told-late" {
		return s.deadline + 3*time.Second
	}
	return s.deadline
}

// watchDeadline loses every held permit once the belief deadline passes.
func (s *Session) watchDeadline() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		left := s.toldAt() - bootNow()
		if left <= 0 {
			for _, p := range s.held {
				p.setLost(&LostError{Kind: LostDeadline})
			}
			left = lookEvery
		}
		s.mu.Unlock()
		if left > lookEvery {
			left = lookEvery
		}
		if sleepCtx(s.ctx, left) != nil {
			return
		}
	}
}

// follow follows the session's events, reconnecting as long as the session lives.
func (s *Session) follow() {
	defer s.wg.Done()
	go s.reasker()
	path := fmt.Sprintf("/v1/sessions/%d/events", s.id)
	for s.ctx.Err() == nil {
		err := s.c.t.stream(s.ctx, path, s.opened, s.event)
		s.mu.Lock()
		s.streamUp = false
		s.mu.Unlock()
		if errors.Is(err, ErrUnknownSession) && s.gone() {
			return
		}
		if errors.Is(err, ErrUnknownSession) {
			s.c.t.moveOn(int(s.c.t.current.Load()))
		}
		if sleepCtx(s.ctx, jittered(streamPause)) != nil {
			return
		}
	}
}

// gone answers whether the cluster no longer knows the session (a keep-alive says).
func (s *Session) gone() bool {
	s.keepAlive(0)
	return s.Err() != nil
}

func (s *Session) opened() {
	s.mu.Lock()
	s.streamUp = true
	s.mu.Unlock()
	s.wantReask()
}

func (s *Session) wantReask() {
	select {
	case s.reask <- struct{}{}:
	default:
	}
}

func (s *Session) event(name, data string) {
	var e struct {
		Session *uint64 `json:"session"`
		Ticket  *uint64 `json:"ticket"`
		Fence   uint64  `json:"fence"`
		Units   uint64  `json:"units"`
		Error   string  `json:"error"`
		Message string  `json:"message"`
		Scope   string  `json:"scope"`
		Reason  string  `json:"reason"`
	}
	if json.Unmarshal([]byte(data), &e) != nil {
		return
	}
	if name == "lagged" {
		s.wantReask()
		return
	}
	if e.Session == nil || *e.Session != s.id {
		return
	}
	switch {
	case name == "granted" && e.Ticket != nil:
		s.granted(*e.Ticket, e.Fence, e.Units)
	case name == "refused" && e.Ticket != nil:
		go s.typedRefusal(*e.Ticket, e.Error, e.Message)
	case name == "halted" && e.Ticket != nil:
		s.lose(*e.Ticket, &LostError{Kind: LostHalted, Scope: e.Scope, Reason: e.Reason})
	case name == "expired":
		s.end(&LostError{Kind: LostExpired})
	case name == "revoked":
		s.end(&LostError{Kind: LostExpired})
	}
}

// typedRefusal asks a refused ticket once more: the answer is the refusal with its fields.
func (s *Session) typedRefusal(ticket uint64, name, message string) {
	s.mu.Lock()
	w, ok := s.waiting[ticket]
	s.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
	defer cancel()
	var a acquireAnswer
	err := s.c.t.call(ctx, "POST", w.path, w.body, &a)
	switch {
	case err == nil:
		s.answered(ticket, a)
	case isRefusal(err):
		s.refused(ticket, err)
	default:
		s.refused(ticket, newError(name, message, 0, nil))
	}
}

func (s *Session) reasker() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.reask:
		}
		s.reaskAll()
	}
}

// reaskAll asks again for every waiting ticket, then reads the halts of every tenant the
// session holds permits of.
func (s *Session) reaskAll() {
	s.mu.Lock()
	type ask struct {
		ticket uint64
		w      *waiter
	}
	var asks []ask
	for t, w := range s.waiting {
		asks = append(asks, ask{t, w})
	}
	tenants := map[string]bool{}
	for _, p := range s.held {
		tenants[p.tenant] = true
	}
	s.mu.Unlock()
	for _, a := range asks {
		ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
		var answer acquireAnswer
		err := s.c.t.call(ctx, "POST", a.w.path, a.w.body, &answer)
		cancel()
		switch {
		case err == nil:
			s.answered(a.ticket, answer)
		case isRefusal(err):
			s.refused(a.ticket, err)
		}
	}
	for tenant := range tenants {
		ctx, cancel := context.WithTimeout(s.ctx, requestDeadline)
		halts, err := s.c.InTenant(tenant).Halts(ctx)
		cancel()
		if err != nil {
			continue
		}
		s.mu.Lock()
		for _, p := range s.held {
			if p.tenant != tenant {
				continue
			}
			for _, h := range halts {
				if h.Scope == "tenant" || (h.Scope == "agent" && h.Agent == p.agent && p.agent != "") {
					scope := h.Scope
					if h.Scope == "agent" {
						scope = "agent " + h.Agent
					}
					p.setLost(&LostError{Kind: LostHalted, Scope: scope, Reason: h.Reason})
					break
				}
			}
		}
		s.mu.Unlock()
	}
}

// Close closes the session: every permit is released and every ticket withdrawn. An error
// means the cluster did not confirm it; the session then expires after its TTL.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.ended != nil && s.ended.Kind == LostClosed
	s.mu.Unlock()
	if already {
		return nil
	}
	s.end(&LostError{Kind: LostClosed})
	s.mu.Lock()
	if s.ended.Kind != LostClosed {
		s.ended = &LostError{Kind: LostClosed}
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	err := s.c.t.call(ctx, "DELETE", fmt.Sprintf("/v1/sessions/%d", s.id), nil, nil)
	if errors.Is(err, ErrUnknownSession) {
		return nil
	}
	return err
}

// WithPermit acquires a permit of limit, runs fn with a context that is cancelled when the
// permit is lost (or ctx ends), and releases the permit when fn returns. It answers fn's
// error, or the permit's loss when fn returned after it.
func (s *Session) WithPermit(ctx context.Context, limit string, fn func(ctx context.Context, p *Permit) error, opts ...AcquireOption) error {
	p, err := s.Acquire(ctx, limit, opts...)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.Lost():
			cancel()
		case <-wctx.Done():
		}
	}()
	ferr := fn(wctx, p)
	lostErr := p.Err()
	var relErr error
	if lostErr != nil {
		// Lost: the release may not get through now; it is retried in the background
		// rather than holding the caller.
		p.releaseInBackground()
	} else {
		rctx, rcancel := context.WithTimeout(context.Background(), requestDeadline)
		relErr = p.Release(rctx)
		rcancel()
	}
	switch {
	case ferr != nil:
		return ferr
	case lostErr != nil:
		return lostErr
	}
	return relErr
}

// -- permits ----------------------------------------------------------------------------

// Permit is a grant held under its session's lease. Pass Fence() to the guarded resource:
// it rejects writes under a smaller fence. Watch Lost(): once closed, the permit is no
// longer believed held (Err says why) and the work it guards must stop.
type Permit struct {
	s      *Session
	ticket uint64
	tenant string
	limit  string
	agent  string
	fence  uint64
	units  uint64

	once     sync.Once
	lost     chan struct{}
	lostErr  *LostError // set before lost is closed; guarded by s.mu
	released bool       // guarded by s.mu

	// twins are the other permits of its ticket, asked again while it was held (only on
	// the permit the session's held map names): one holding, told every loss it is told
	// (markLost). Guarded by s.mu.
	twins []*Permit
}

// Fence answers the permit's fence: greater than every earlier grant's of the limit.
func (p *Permit) Fence() uint64 { return p.fence }

// Units answers the units granted.
func (p *Permit) Units() uint64 { return p.units }

// Ticket answers the permit's ticket in its session.
func (p *Permit) Ticket() uint64 { return p.ticket }

// Limit answers the limit the permit is of.
func (p *Permit) Limit() string { return p.limit }

// Lost answers a channel closed once the permit is no longer believed held.
func (p *Permit) Lost() <-chan struct{} { return p.lost }

// Err answers nil while the permit is believed held, else a *LostError (matching ErrLost)
// saying why: the deadline passed, a halt, the session expired or closed.
func (p *Permit) Err() error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	// The deadline is looked at here too, not only by the session's watcher: a caller
	// that asks right after a stall (a suspend, a stopped process) is told at once.
	if p.lostErr == nil && !p.released && bootNow() >= s.toldAt() {
		p.setLost(&LostError{Kind: LostDeadline})
	}
	if p.lostErr == nil {
		return nil
	}
	return p.lostErr
}

// setLost marks the permit lost once (callers hold s.mu).
func (p *Permit) setLost(why *LostError) {
	// PLANTED(go-told-late): a loss learned now reaches the application 3 s later.
	if plantedActive == "go-told-late" && why.Kind != LostDeadline {
		time.AfterFunc(3*time.Second, func() {
			p.s.mu.Lock()
			defer p.s.mu.Unlock()
			p.markLost(why)
		})
		return
	}
	p.markLost(why)
}

// markLost closes Lost once, with why as Err's answer, and tells its twins (callers hold
// s.mu).
func (p *Permit) markLost(why *LostError) {
	p.once.Do(func() {
		p.lostErr = why
		close(p.lost)
	})
	for _, twin := range p.twins {
		twin.markLost(why)
	}
}

// Release releases the permit (idempotent). Its loss of belief comes first: the permit is
// no longer believed held from the moment the release is sent.
func (p *Permit) Release(ctx context.Context) error {
	s := p.s
	s.mu.Lock()
	if p.released {
		s.mu.Unlock()
		return nil
	}
	p.released = true
	ended := s.ended != nil
	s.mu.Unlock()
	s.forget(p.ticket, p)
	if ended {
		return nil
	}
	err := s.c.t.call(ctx, "POST", fmt.Sprintf("/v1/sessions/%d/release", s.id), map[string]any{"ticket": p.ticket}, nil)
	if err != nil && !isRefusal(err) {
		s.releaseInBackground(p.ticket, true)
	}
	if isRefusal(err) && (errors.Is(err, ErrUnknownSession) || errors.Is(err, ErrTicketReleased)) {
		return nil
	}
	return err
}

// releaseInBackground releases the permit without waiting for the answer.
func (p *Permit) releaseInBackground() {
	s := p.s
	s.mu.Lock()
	already := p.released
	p.released = true
	s.mu.Unlock()
	if already {
		return
	}
	s.forget(p.ticket, p)
	s.releaseInBackground(p.ticket, false)
}

// Settlement is a settle's answer: Overrun is true when the cost was above the estimate
// (the difference charged and recorded).
type Settlement struct {
	Status            string `json:"status"`
	Duplicate         bool   `json:"duplicate"`
	OverrunTokens     uint64 `json:"overrun_tokens"`
	OverrunMinorUnits uint64 `json:"overrun_minor_units"`
}

// Settle settles an estimate (Estimate()) at its actual cost, idempotent by ticket: below
// the estimate the difference returns to the bucket.
func (p *Permit) Settle(ctx context.Context, cost uint64) (Settlement, error) {
	var out Settlement
	err := p.s.c.t.call(ctx, "POST", fmt.Sprintf("/v1/sessions/%d/settle", p.s.id),
		map[string]any{"ticket": p.ticket, "cost": cost}, &out)
	return out, err
}
