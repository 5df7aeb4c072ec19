package weir

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// Token leases held by a session (Session.Lease, Lease): a share of a rate limit (or of
// one key of a keyed limit) spent locally, without a request per take. The rules and why
// they keep the limit exact are the machine's essay, "Token leases"
// (crates/weir-core/src/machine/mod.rs); this file is the holder's half of them.
//
// The local bucket: its size is the lease's cap; it starts with the tokens the cluster
// moved to it and refills at the lease's rate on bootNow's clock from the moment a reply is
// in hand (never from when the request was sent: the cluster lowered its own refill only
// when it applied the entry). TryTake decides from it alone, and only while the session's
// belief deadline holds (the send time of the last acknowledged keep-alive plus the TTL,
// less the margin); past it, once the session ended, or once a refusal (a halt) answered a
// renewal, the bucket is emptied and nothing more is spent from it.
//
// Renewals: a goroutine renews the lease every keep-alive period (TTL/5), and sooner when a
// take found the bucket short, asking for a rate of one and a half times what was taken
// since the last renewal (at least an eighth of what the options want, at most what they
// want) and a cap of what the options want, both at most the fair share the last reply
// advised when the lease is above it. A decrease applies here when the request is sent
// (the rate at once, the level down to the new cap, the excess given back in the request);
// an increase only when the reply arrives. A request whose outcome is unknown keeps the
// decreases and gains nothing. The session's lease requests go one at a time, each with
// the next of the session's sequence numbers, so none is taken for a retry of another; a
// retry of one request (same number) changes nothing on the cluster. So the holder's share
// is never larger than the cluster counts it.
//
// Ending: End gives the lease up and returns the bucket's tokens. A lease whose session
// ends (closed or expired) ends with it on the cluster; what it held is counted as spent.
//
// It must never: spend past the session's belief deadline or after its end, raise its
// share before the cluster's answer, or count a reply's tokens twice.

// micro is micro-tokens per token.
const micro = 1_000_000

// LeaseOptions says what a lease is for, and the most it wants.
type LeaseOptions struct {
	// Tenant of the limit ("" for the client's).
	Tenant string
	Limit  string
	// Key of a keyed limit ("" for none).
	Key string
	// RatePerS is the most refill this holder wants, tokens a second.
	RatePerS float64
	// Cap is the most tokens this holder wants to hold at once (its local bucket's size).
	Cap uint64
}

func (o LeaseOptions) rateMicro() uint64 {
	if o.RatePerS <= 0 {
		return 0
	}
	return uint64(o.RatePerS * micro)
}

// LeaseFigures are a lease's counts, for benches and diagnostics.
type LeaseFigures struct {
	// Local counts takes decided from the local bucket; Short, takes it could not cover.
	Local, Short uint64
	// Requests counts lease requests sent: the first, renewals and the end.
	Requests uint64
	// RateMicroPerS and Cap are the share now: micro-tokens a second, and tokens.
	RateMicroPerS, Cap uint64
}

// leaseShare is one part of a `leased` answer.
type leaseShare struct {
	RateMicroPerS     uint64 `json:"rate_micro_per_s"`
	Cap               uint64 `json:"cap"`
	TokensMicro       uint64 `json:"tokens_micro"`
	FairRateMicroPerS uint64 `json:"fair_rate_micro_per_s"`
	FairCap           uint64 `json:"fair_cap"`
	Duplicate         bool   `json:"duplicate"`
}

// Lease is a token lease on one limit (or key), held by a session: takes decided locally
// while it has tokens and the session's belief holds. It is safe for concurrent use.
type Lease struct {
	s        *Session
	o        LeaseOptions
	short    chan struct{}   // a take found the bucket short: renew early
	ctx      context.Context // ends with the session, or when End begins
	cancel   context.CancelFunc
	renewing sync.WaitGroup // the renewal goroutine

	mu         sync.Mutex
	rateMicro  uint64
	capTokens  uint64
	levelMicro uint64
	remainder  uint64        // refill carried below a micro-token, micro-tokens x ns / s
	refilledAt time.Duration // bootNow reading
	taken      uint64        // units taken locally since the last request was sent
	fairRate   uint64
	fairCap    uint64
	ending     bool  // End was called: no renewal is sent any more
	stopped    error // why the lease no longer decides locally
	figures    LeaseFigures
}

// Lease leases a share of a rate limit (or of one key) for this session: takes on it are
// then decided locally while the lease has tokens (lease.go). The first request is answered
// before this returns; a refusal (a halt, an unknown limit, a limit that is not rate-only)
// is its *Error.
func (s *Session) Lease(ctx context.Context, o LeaseOptions) (*Lease, error) {
	if o.Tenant == "" {
		o.Tenant = s.c.tenant
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("weir: session %d: %w", s.id, err)
	}
	l := &Lease{
		s: s, o: o, short: make(chan struct{}, 1),
		refilledAt: bootNow(), fairRate: o.rateMicro(), fairCap: o.Cap,
	}
	if err := l.request(ctx, o.rateMicro(), o.Cap, false); err != nil {
		if !isRefusal(err) {
			// It may have been applied: end it, so that its share does not stand unused
			// until the session ends (what it may have moved here is counted as spent).
			go func() {
				ectx, cancel := context.WithTimeout(s.ctx, requestDeadline)
				defer cancel()
				_ = l.request(ectx, 0, 0, true)
			}()
		}
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(s.ctx)
	l.renewing.Add(1)
	go l.renew()
	return l, nil
}

// TryTake takes units from the local bucket if it has them and the session's belief
// holds: no network, no wait. False means this lease cannot cover them now (ask the
// cluster with Take, or wait for the refill). Units 0 is 1.
func (l *Lease) TryTake(units uint32) bool {
	if units == 0 {
		units = 1
	}
	now := bootNow()
	s := l.s
	s.mu.Lock()
	believed := s.ended == nil && now < s.deadline
	s.mu.Unlock()
	l.mu.Lock()
	if !believed {
		// Past the belief deadline or the session's end: nothing more is spent here, and
		// the time without belief earns no refill.
		l.levelMicro, l.remainder = 0, 0
		if now > l.refilledAt {
			l.refilledAt = now
		}
		l.figures.Short++
		l.mu.Unlock()
		return false
	}
	if l.stopped != nil {
		l.figures.Short++
		l.mu.Unlock()
		return false
	}
	l.refill(now)
	need := uint64(units) * micro
	if l.levelMicro >= need {
		l.levelMicro -= need
		l.taken += uint64(units)
		l.figures.Local++
		l.mu.Unlock()
		return true
	}
	l.figures.Short++
	l.mu.Unlock()
	select {
	case l.short <- struct{}{}:
	default:
	}
	return false
}

// Take takes units: from the local bucket when it has them, else from the cluster (one
// take, as Client.Take). It answers false when neither has room now (the cluster answered
// ErrBusy), and the refusal for any other (ErrHalted, ...). Once the session ended it
// answers the session's end. Units 0 is 1.
func (l *Lease) Take(ctx context.Context, units uint32) (bool, error) {
	if units == 0 {
		units = 1
	}
	if l.TryTake(units) {
		return true, nil
	}
	if err := l.s.Err(); err != nil {
		return false, fmt.Errorf("weir: session %d: %w", l.s.id, err)
	}
	_, err := l.s.c.InTenant(l.o.Tenant).Take(ctx, l.o.Limit, TakeOptions{Key: l.o.Key, Units: units})
	if errors.Is(err, ErrBusy) {
		return false, nil
	}
	return err == nil, err
}

// Figures answers the lease's counts now.
func (l *Lease) Figures() LeaseFigures {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.figures
}

// Err answers why the lease no longer decides locally (its end, a refusal of a renewal, its
// session's end), or nil. A lease past its session's belief deadline is not ended: it
// decides nothing until a keep-alive is acknowledged again.
func (l *Lease) Err() error {
	if err := l.s.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped
}

// End gives the lease up: the local bucket stops at once and its tokens go back to the
// cluster. Idempotent. An error means the cluster did not confirm it; the lease then ends
// with its session, and what it held is counted as spent.
func (l *Lease) End(ctx context.Context) error {
	l.mu.Lock()
	already := l.ending
	l.ending = true
	l.mu.Unlock()
	if already {
		return nil
	}
	// A renewal under way is cut short: its outcome unknown, it gained nothing here.
	l.cancel()
	l.renewing.Wait()
	var err error
	if l.s.Err() == nil {
		err = l.request(ctx, 0, 0, true)
	}
	l.stop(errLeaseEnded)
	return err
}

var errLeaseEnded = errors.New("weir: lease ended")

// refill brings the bucket up to now (callers hold l.mu).
func (l *Lease) refill(now time.Duration) {
	elapsed := now - l.refilledAt
	if elapsed <= 0 {
		return
	}
	l.refilledAt = now
	full := l.capTokens * micro
	if l.levelMicro >= full {
		l.levelMicro, l.remainder = full, 0
		return
	}
	// rate (micro-tokens/s) x elapsed (ns) / 1e9, exactly, with the remainder carried.
	hi, lo := bits.Mul64(l.rateMicro, uint64(elapsed))
	lo, carry := bits.Add64(lo, l.remainder, 0)
	hi += carry
	if hi >= 1e9 {
		l.levelMicro, l.remainder = full, 0
		return
	}
	added, rem := bits.Div64(hi, lo, 1e9)
	if added >= full-l.levelMicro {
		l.levelMicro, l.remainder = full, 0
		return
	}
	l.levelMicro += added
	l.remainder = rem
}

// lowerTo lowers the share to (rate, cap) where it is above them, at once; it answers the
// micro-tokens the lower cap leaves over, which the request gives back (callers hold l.mu).
func (l *Lease) lowerTo(rate, capTokens uint64, now time.Duration) uint64 {
	l.refill(now)
	if rate < l.rateMicro {
		l.rateMicro = rate
	}
	if capTokens < l.capTokens {
		l.capTokens = capTokens
	}
	kept := l.levelMicro
	if kept > l.capTokens*micro {
		kept = l.capTokens * micro
	}
	returned := l.levelMicro - kept
	l.levelMicro = kept
	return returned
}

// adopt takes the cluster's answer, arrived at now: the share it stands at and the tokens
// it moved here (callers hold l.mu).
func (l *Lease) adopt(share leaseShare, now time.Duration) {
	// Refilled at the old rate up to now; the new one counts from now.
	l.refill(now)
	l.rateMicro, l.capTokens = share.RateMicroPerS, share.Cap
	l.levelMicro += share.TokensMicro
	if l.levelMicro > l.capTokens*micro {
		l.levelMicro = l.capTokens * micro
	}
	l.fairRate, l.fairCap = share.FairRateMicroPerS, share.FairCap
	l.figures.RateMicroPerS, l.figures.Cap = l.rateMicro, l.capTokens
}

// stop empties the bucket for good, keeping the first reason given.
func (l *Lease) stop(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.levelMicro, l.rateMicro, l.remainder = 0, 0, 0
	if l.stopped == nil {
		l.stopped = why
	}
}

// request sends one lease request asking (rate, capTokens): the share is lowered here at
// once where asked lower, and the answer taken in. A refusal stops the lease (a halt, a
// removed limit, the session's end) and is answered; an error of outcome unknown leaves the
// decreases made and nothing gained. Only End's (final) request is sent once End began.
func (l *Lease) request(ctx context.Context, rate, capTokens uint64, final bool) error {
	s := l.s
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	l.mu.Lock()
	if (l.ending && !final) || l.stopped != nil {
		l.mu.Unlock()
		return nil
	}
	s.leaseSeq++
	seq := s.leaseSeq
	l.taken = 0
	l.figures.Requests++
	returned := l.lowerTo(rate, capTokens, bootNow())
	l.mu.Unlock()
	part := map[string]any{
		"limit": l.o.Limit, "rate_micro_per_s": rate, "cap": capTokens, "returned_micro": returned,
	}
	if l.o.Key != "" {
		part["key"] = l.o.Key
	}
	body := map[string]any{"session": s.id, "seq": seq, "parts": []any{part}}
	var answer struct {
		Status string       `json:"status"`
		Parts  []leaseShare `json:"parts"`
	}
	err := s.hedged(ctx, "POST", "/v1/tenants/"+q(l.o.Tenant)+"/leases", body, &answer)
	now := bootNow()
	switch {
	case err == nil && answer.Status == "leased" && len(answer.Parts) == 1:
		l.mu.Lock()
		l.adopt(answer.Parts[0], now)
		l.mu.Unlock()
		return nil
	case err == nil:
		return failure(ErrProtocol, "Protocol", "a lease request answered %q with %d parts", answer.Status, len(answer.Parts))
	case isRefusal(err):
		if errors.Is(err, ErrUnknownSession) {
			s.end(&LostError{Kind: LostExpired})
		}
		l.stop(err)
	}
	return err
}

// renew renews the lease while it and its session live: every keep-alive period, or sooner
// when a take found the bucket short, asking for what demand and the fair share say.
func (l *Lease) renew() {
	defer l.renewing.Done()
	s := l.s
	period := s.ttl / keepalivesPerTTL
	last := bootNow()
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		woken := false
		select {
		case <-l.ctx.Done():
			return
		case <-l.short:
			woken = true
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
		if woken {
			// A short bucket renews early, but not more than every period / 8.
			if sleepCtx(l.ctx, period/8) != nil {
				return
			}
		}
		now := bootNow()
		l.mu.Lock()
		if l.stopped != nil || l.ending {
			l.mu.Unlock()
			return
		}
		elapsed := now - last
		if elapsed < time.Millisecond {
			elapsed = time.Millisecond
		}
		want := l.o.rateMicro()
		hi, lo := bits.Mul64(l.taken, micro*uint64(time.Second))
		demand := want
		if hi < uint64(elapsed) {
			demand, _ = bits.Div64(hi, lo, uint64(elapsed))
		}
		rate := demand + demand/2
		if rate < want/8 {
			rate = want / 8
		}
		if rate > want || woken {
			rate = want
		}
		capTokens := l.o.Cap
		if l.rateMicro > l.fairRate && rate > l.fairRate {
			rate = l.fairRate
		}
		if l.capTokens > l.fairCap && capTokens > l.fairCap {
			capTokens = l.fairCap
		}
		l.mu.Unlock()
		last = now
		ctx, cancel := context.WithTimeout(l.ctx, requestDeadline)
		err := l.request(ctx, rate, capTokens, false)
		cancel()
		next := period
		if err != nil {
			next = period / 4
		}
		timer.Reset(next)
	}
}
