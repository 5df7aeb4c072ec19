package weir

// The README's four examples, each built as a program of its own module that requires
// this one through a replace (as a user of a checkout would) and run against a real
// cluster; each must exit 0 and print what the README says it shows.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var readmeBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlock.FindAllStringSubmatch(string(readme), -1)
	want := []string{"done", "alice: busy", "settled: settled", "halted: true"}
	if len(blocks) != len(want) {
		t.Fatalf("README has %d go examples, want %d", len(blocks), len(want))
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, false, nil)
	for i, b := range blocks {
		dir := t.TempDir()
		mod := "module example\n\ngo 1.19\n\nrequire github.com/weir-limits/weir/clients/go v0.0.0\n\n" +
			"replace github.com/weir-limits/weir/clients/go => " + here + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "run", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off",
			"WEIR_HTTP_SERVERS="+strings.Join(c.servers(), ","), "WEIR_CA=", "WEIR_TOKEN=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("example %d: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(string(out), want[i]) {
			t.Fatalf("example %d printed no %q:\n%s", i+1, want[i], out)
		}
		t.Logf("example %d:\n%s", i+1, out)
	}
}
