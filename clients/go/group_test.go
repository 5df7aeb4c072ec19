package weir

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A cluster of two data groups: a client of group 2 (Config.Group, the Weir-Group header
// on every request) holds the permits of a tenant placed there; a client of the default
// group is refused ErrWrongGroup naming group 2.
func TestAClientOfAGroupHoldsThePermitsOfItsTenants(t *testing.T) {
	c := startClusterWith(t, false, nil, "groups = 2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := New(c.config(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	two := uint64(2)
	if g, err := admin.PlaceTenant(ctx, &two); err != nil || g != 2 {
		t.Fatalf("place b in group 2: %d, %v", g, err)
	}
	if g, err := admin.PlaceTenant(ctx, nil); err != nil || g != 2 {
		t.Fatalf("where b lives: %d, %v", g, err)
	}
	one := uint64(1)
	if _, err := admin.PlaceTenant(ctx, &one); !errors.Is(err, ErrWrongGroup) {
		t.Fatalf("b placed again in group 1: %v, want ErrWrongGroup", err)
	}

	cfg := c.config(t, "b")
	cfg.Group = &two
	inTwo, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer inTwo.Close()
	if err := inTwo.DefineLimit(ctx, "db", LimitSpec{Concurrent: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := inTwo.OpenSession(ctx, SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx, "db")
	if err != nil {
		t.Fatalf("acquire in group 2: %v", err)
	}
	if p.Fence() == 0 {
		t.Fatal("a grant without a fence")
	}
	if st, err := inTwo.Limit(ctx, "db"); err != nil || st.InUse != 1 {
		t.Fatalf("db in group 2: %+v, %v", st, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	plain, err := New(c.config(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	s, err = plain.OpenSession(ctx, SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	_, err = s.Acquire(ctx, "db")
	var e *Error
	if !errors.Is(err, ErrWrongGroup) || !errors.As(err, &e) {
		t.Fatalf("acquire in the default group: %v, want ErrWrongGroup", err)
	}
	if group, _ := e.Fields["group"].(float64); group != 2 || e.Status != 421 {
		t.Fatalf("WrongGroup names group %v (status %d): %v", e.Fields["group"], e.Status, e)
	}
	if !strings.Contains(e.Message, "open one with the header `Weir-Group: 2`") {
		t.Fatalf("the refusal says how: %v", e)
	}
}

func TestWeirGroupFromTheEnvironment(t *testing.T) {
	t.Setenv("WEIR_GROUP", "2")
	cfg, err := ConfigFromEnv()
	if err != nil || cfg.Group == nil || *cfg.Group != 2 {
		t.Fatalf("WEIR_GROUP=2: %+v, %v", cfg.Group, err)
	}
	t.Setenv("WEIR_GROUP", "two")
	if _, err := ConfigFromEnv(); err == nil || err.Error() != `weir: WEIR_GROUP must be a group number: got "two"` {
		t.Fatalf("WEIR_GROUP=two: %v", err)
	}
}
