//go:build weir_planted

package weir

import "os"

// Planted bugs: negative controls for the partition harness (jepsen/planted.sh), the Go
// side of crates/weir-core/src/planted.rs. A plant is compiled in only with the build tag
// weir_planted (an application is never built with it; the harness builds its Go holder
// with it only when it is itself a planted build), and is on only when WEIR_PLANT names it.
// Each plant is one small branch marked PLANTED(<name>) at the exact spot of the bug.

// plantedActive is the plant switched on in this process ("" for none).
var plantedActive = func() string {
	if name := os.Getenv("WEIR_PLANT"); name == "go-told-late" {
		return name
	}
	return ""
}()
