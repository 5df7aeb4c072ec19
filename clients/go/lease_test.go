package weir

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The local bucket refills exactly at its rate however often it is looked at: time between
// looks is never lost (the carried remainder), nor counted twice, and never above the cap.
func TestLeaseRefillCarries(t *testing.T) {
	l := &Lease{rateMicro: 3, capTokens: 1}
	for step := 1; step <= 1000; step++ {
		l.refill(time.Duration(step) * time.Millisecond)
	}
	if l.levelMicro != 3 {
		t.Fatalf("1,000 looks a millisecond apart at 3 micro-tokens/s refilled %d micro-tokens in 1 s", l.levelMicro)
	}
	for step := 1; step <= 100_000; step++ {
		l.refill(time.Second + time.Duration(step)*37*time.Microsecond)
	}
	if l.levelMicro != 3+11 {
		t.Fatalf("100,000 looks 37 us apart (3.7 s) at 3 micro-tokens/s: %d micro-tokens, want 3 + 11", l.levelMicro)
	}
	l.rateMicro = 5_000_000
	l.refill(time.Hour)
	if l.levelMicro != micro {
		t.Fatalf("an hour at 5 tokens/s holds %d micro-tokens, want the cap of 1 token", l.levelMicro)
	}
}

// Token leases against one real three-node cluster, each case in a tenant of its own.
func TestLeases(t *testing.T) {
	c := startCluster(t, false, nil)
	ctx := context.Background()
	setup := func(t *testing.T, tenant string, spec LimitSpec) (*Client, *Session) {
		t.Helper()
		cl, err := New(c.config(t, tenant))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.DefineLimit(ctx, "api", spec); err != nil {
			t.Fatal(err)
		}
		s, err := cl.OpenSession(ctx, SessionOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = s.Close(cctx)
		})
		return cl, s
	}

	// Over a window that starts with the bucket full, local takes are at most its cap plus
	// the lease's rate times the window, and the refill (renewed as it goes) gives more than
	// the cap; an idle lease is renewed down to an eighth of its rate.
	t.Run("local takes within cap plus rate times elapsed", func(t *testing.T) {
		_, s := setup(t, "lease-local", LimitSpec{PerSecond: 100, Burst: 100})
		l, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 20, Cap: 10})
		if err != nil {
			t.Fatal(err)
		}
		if f := l.Figures(); f.RateMicroPerS != 20_000_000 || f.Cap != 10 {
			t.Fatalf("the first share: %+v", f)
		}
		time.Sleep(300 * time.Millisecond)
		start := bootNow()
		ok, tries := 0, 0
		for bootNow()-start < time.Second && tries < 5000 {
			tries++
			if l.TryTake(1) {
				ok++
			}
			time.Sleep(time.Millisecond)
		}
		window := (bootNow() - start).Seconds()
		if bound := 10 + 20*window; float64(ok) > bound {
			t.Fatalf("%d local takes in %.3f s, above cap 10 + 20/s x window = %.1f", ok, window, bound)
		}
		if ok < 20 {
			t.Fatalf("only %d local takes in %.3f s: the lease was not refilled", ok, window)
		}
		f := l.Figures()
		if f.Local != uint64(ok) || f.Requests < 3 {
			t.Fatalf("figures %+v after %d local takes over a second of 400 ms renewals", f, ok)
		}
		deadline := time.Now().Add(3 * time.Second)
		for l.Figures().RateMicroPerS != 20_000_000/8 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if f := l.Figures(); f.RateMicroPerS != 20_000_000/8 {
			t.Fatalf("an idle lease renewed at %d micro-tokens/s, want an eighth of 20/s", f.RateMicroPerS)
		}
		if err := l.End(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// End gives the bucket's tokens back to the cluster at once, and the lease spends no more.
	t.Run("tokens back at end", func(t *testing.T) {
		cl, s := setup(t, "lease-end", LimitSpec{PerSecond: 1, Burst: 40})
		l, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 0.5, Cap: 20})
		if err != nil {
			t.Fatal(err)
		}
		st, err := cl.Limit(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		if st.Tokens > 21 {
			t.Fatalf("the cluster holds %d tokens with 20 leased out of 40", st.Tokens)
		}
		if !l.TryTake(2) {
			t.Fatal("a full lease refused 2 tokens")
		}
		if err := l.End(ctx); err != nil {
			t.Fatal(err)
		}
		if l.TryTake(1) || !errors.Is(l.Err(), errLeaseEnded) {
			t.Fatalf("an ended lease: err %v", l.Err())
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if st, err = cl.Limit(ctx, "api"); err == nil && st.Tokens >= 38 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || st.Tokens < 38 || st.Tokens > 40 {
			t.Fatalf("after the end the cluster holds %d tokens (%v), want the 18 left returned", st.Tokens, err)
		}
	})

	// Once the session is closed, the lease spends nothing, locally or from the cluster.
	t.Run("nothing spent after the session closes", func(t *testing.T) {
		_, s := setup(t, "lease-close", LimitSpec{PerSecond: 100, Burst: 100})
		l, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 50, Cap: 20})
		if err != nil {
			t.Fatal(err)
		}
		if !l.TryTake(1) {
			t.Fatal("a full lease refused a token")
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if l.TryTake(1) {
			t.Fatal("a token spent after the session closed")
		}
		if ok, err := l.Take(ctx, 1); ok || !errors.Is(err, ErrSessionEnded) {
			t.Fatalf("a take after the session closed: %v %v", ok, err)
		}
	})

	// Cut off from every node, the lease spends locally until the session's belief deadline
	// (before a TTL has passed since the cut) and nothing after it.
	t.Run("nothing spent past the belief deadline", func(t *testing.T) {
		admin, err := New(c.config(t, "lease-deadline"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := admin.DefineLimit(ctx, "api", LimitSpec{PerSecond: 1000, Burst: 1000}); err != nil {
			t.Fatal(err)
		}
		cfg, ps := c.proxiedConfig(t, "lease-deadline")
		cl, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		s, err := cl.OpenSession(ctx, SessionOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = s.Close(cctx)
		}()
		l, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 200, Cap: 100})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		cut := bootNow()
		for _, p := range ps {
			p.cut()
		}
		var lastOK time.Duration
		okAfterCut, tries := 0, 0
		for bootNow()-cut < 2600*time.Millisecond && tries < 2000 {
			tries++
			if l.TryTake(1) {
				okAfterCut++
				lastOK = bootNow() - cut
			}
			time.Sleep(2 * time.Millisecond)
		}
		if okAfterCut == 0 {
			t.Fatal("no local take while cut off before the deadline")
		}
		if lastOK >= 2*time.Second {
			t.Fatalf("a local take %v after the cut, past the TTL of 2 s (deadline left %v)", lastOK, s.DeadlineLeft())
		}
		if s.DeadlineLeft() > 0 {
			t.Fatalf("the deadline is %v ahead with every node cut off", s.DeadlineLeft())
		}
	})

	// A renewal refused by a halt stops the lease: no more local takes, and a take answers
	// the halt.
	t.Run("a halt stops the lease", func(t *testing.T) {
		cl, s := setup(t, "lease-halt", LimitSpec{PerSecond: 100, Burst: 100})
		l, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 50, Cap: 20})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.SetHalt(ctx, "stop"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for l.Err() == nil && time.Now().Before(deadline) {
			l.TryTake(1)
			time.Sleep(20 * time.Millisecond)
		}
		if !errors.Is(l.Err(), ErrHalted) {
			t.Fatalf("the lease after a halt: %v", l.Err())
		}
		if l.TryTake(1) {
			t.Fatal("a local take after the halt refused a renewal")
		}
		if ok, err := l.Take(ctx, 1); ok || !errors.Is(err, ErrHalted) {
			t.Fatalf("a take after the halt: %v %v", ok, err)
		}
		if _, err := s.Lease(ctx, LeaseOptions{Limit: "api", RatePerS: 1, Cap: 1}); !errors.Is(err, ErrHalted) {
			t.Fatalf("a new lease under the halt: %v", err)
		}
	})
}
