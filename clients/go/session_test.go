package weir

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

func TestMarginAndDeadline(t *testing.T) {
	if got := marginFor(3 * time.Second); got != 300*time.Millisecond {
		t.Fatalf("margin of 3 s: %v", got)
	}
	if got := marginFor(500 * time.Millisecond); got != 100*time.Millisecond {
		t.Fatalf("margin of 500 ms: %v", got)
	}
	if got := deadlineAfter(time.Second, 3*time.Second); got != 3700*time.Millisecond {
		t.Fatalf("deadline after a keep-alive sent at 1 s, TTL 3 s: %v", got)
	}
	a := bootNow()
	time.Sleep(20 * time.Millisecond)
	if b := bootNow(); b-a < 20*time.Millisecond {
		t.Fatalf("bootNow advanced %v over a 20 ms sleep", b-a)
	}
}

func TestErrorKinds(t *testing.T) {
	e := newError("Busy", "db: no room", 429, map[string]any{"retry_after_ms": 250.0})
	var as *Error
	if !errors.Is(e, ErrBusy) || errors.Is(e, ErrHalted) || !errors.As(error(e), &as) || as.RetryAfter != 250*time.Millisecond {
		t.Fatalf("Busy: %v %+v", e, as)
	}
	if !errors.Is(newError("Unauthenticated", "", 401, nil), ErrUnauthenticated) {
		t.Fatal("401 is ErrUnauthenticated")
	}
	if !errors.Is(newError("Whatever", "", 403, nil), ErrForbidden) {
		t.Fatal("an unnamed 403 is ErrForbidden")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	to := timedOut(ctx, "db")
	if !errors.Is(to, ErrTimedOut) || !errors.Is(to, context.Canceled) {
		t.Fatalf("timed out: %v", to)
	}
	lost := &LostError{Kind: LostHalted, Scope: "tenant", Reason: "x"}
	if !errors.Is(lost, ErrLost) || !errors.Is(lost, ErrHalted) || errors.Is(lost, ErrSessionEnded) {
		t.Fatal("a halt's loss")
	}
	released := &LostError{Kind: LostReleased}
	if !errors.Is(released, ErrLost) || errors.Is(released, ErrSessionEnded) || released.Error() != "weir: permit lost: released" {
		t.Fatalf("a release through another permit of the ticket: %v", released)
	}
}

// A permit's work is cancelled when the client is cut off from every node: WithPermit's
// context ends by the belief deadline, before the TTL has passed since the cut.
func TestWithPermitCancelledOnLoss(t *testing.T) {
	c := startCluster(t, false, nil)
	ctx := context.Background()
	admin, err := New(c.config(t, "with-permit"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DefineLimit(ctx, "db", LimitSpec{Concurrent: 1}); err != nil {
		t.Fatal(err)
	}
	cfg, ps := c.proxiedConfig(t, "with-permit")
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.OpenSession(ctx, SessionOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var cutAt, doneAt time.Time
	err = s.WithPermit(ctx, "db", func(ctx context.Context, p *Permit) error {
		time.Sleep(300 * time.Millisecond)
		cutAt = time.Now()
		for _, p := range ps {
			p.cut()
		}
		select {
		case <-ctx.Done():
			doneAt = time.Now()
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the work's context outlived the permit")
		}
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("WithPermit answered %v, want the permit's loss", err)
	}
	if d := doneAt.Sub(cutAt); d > time.Second {
		t.Fatalf("the work was cancelled %v after the cut, past the TTL", d)
	}
}

// A node that stops answering (SIGSTOP) while its process lives is passed over within
// about a second: an acquire sent to it is answered by another node, and the session's
// permit is still believed held after more than a TTL (the silence rule, G9).
func TestSilentNodePassedOver(t *testing.T) {
	c := startCluster(t, false, nil)
	ctx := context.Background()
	cl, err := New(c.config(t, "silent-node"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.DefineLimit(ctx, "db", LimitSpec{Concurrent: 2}); err != nil {
		t.Fatal(err)
	}
	s, err := cl.OpenSession(ctx, SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	held, err := s.Acquire(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	// Stop the node the client talks to, unless it leads (a follower keeps the test to the
	// client's rule, not an election's).
	var status struct {
		Leader uint64 `json:"leader"`
	}
	if err := cl.Do(ctx, "GET", "/v1/status", nil, &status); err != nil {
		t.Fatal(err)
	}
	cur := int(cl.t.current.Load())
	if uint64(cur+1) == status.Leader {
		cur = (cur + 1) % len(c.nodes)
		cl.t.current.Store(int32(cur))
	}
	stopped := c.nodes[cur].cmd.Process
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopped.Signal(syscall.SIGCONT) }()
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	p, err := s.Acquire(actx, "db")
	if err != nil {
		t.Fatalf("acquire with the current node stopped: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the stopped node was passed over after %v", took)
	}
	if int(cl.t.current.Load()) == cur {
		t.Fatal("the client still names the stopped node current")
	}
	time.Sleep(3500 * time.Millisecond)
	if held.Err() != nil || p.Err() != nil {
		t.Fatalf("permits lost with a quorum up: %v, %v", held.Err(), p.Err())
	}
}

// A ticket of the caller's choosing asked for again while held: the same grant under the
// same fence, charged once, and one holding of two permits. Releasing either releases the
// ticket and tells the other (LostReleased), so neither is believed held on a ticket the
// cluster freed; a halt tells both.
func TestHeldTicketAskedAgainIsOneHoldingOfTwoPermits(t *testing.T) {
	c := startCluster(t, false, nil)
	ctx := context.Background()
	cl, err := New(c.config(t, "reask"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.DefineLimit(ctx, "db", LimitSpec{Concurrent: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := cl.OpenSession(ctx, SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	inUse := func() uint64 {
		st, err := cl.Limit(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		return st.InUse
	}
	told := func(p *Permit, name string, want LostKind) {
		t.Helper()
		select {
		case <-p.Lost():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not told within 5 s (Err %v)", name, p.Err())
		}
		var lost *LostError
		if !errors.As(p.Err(), &lost) || lost.Kind != want {
			t.Fatalf("%s lost with %v, want %v", name, p.Err(), want)
		}
	}

	t.Log("asked again: the same fence, charged once; releasing the second tells the first")
	first, err := s.Acquire(ctx, "db", Ticket(7001))
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Acquire(ctx, "db", Ticket(7001), NoWait())
	if err != nil {
		t.Fatalf("asked again: %v", err)
	}
	if again.Fence() != first.Fence() || again.Ticket() != 7001 {
		t.Fatalf("asked again: ticket %d fence %d, want 7001 and %d", again.Ticket(), again.Fence(), first.Fence())
	}
	if n := inUse(); n != 1 {
		t.Fatalf("in use %d after asking again, want 1", n)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	told(first, "the first permit", LostReleased)
	if again.Err() != nil {
		t.Fatalf("the released permit reports %v", again.Err())
	}
	if n := inUse(); n != 0 {
		t.Fatalf("in use %d after the release, want 0", n)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("releasing the other permit of a released ticket: %v", err)
	}

	t.Log("a halt tells both; releasing one after it leaves the other's reason")
	first, err = s.Acquire(ctx, "db", Ticket(8001))
	if err != nil {
		t.Fatal(err)
	}
	again, err = s.Acquire(ctx, "db", Ticket(8001), NoWait())
	if err != nil {
		t.Fatalf("asked again: %v", err)
	}
	if err := cl.SetHalt(ctx, "asked again"); err != nil {
		t.Fatal(err)
	}
	told(first, "the first permit", LostHalted)
	told(again, "the second permit", LostHalted)
	if err := cl.ClearHalt(ctx); err != nil {
		t.Fatal(err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := first.Err(); got == nil || got.Error() != "weir: permit lost: halted (tenant): asked again" {
		t.Fatalf("the first permit after the second's release: %v", got)
	}
	if n := inUse(); n != 0 {
		t.Fatalf("in use %d after the release, want 0", n)
	}
}
