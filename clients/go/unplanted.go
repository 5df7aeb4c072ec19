//go:build !weir_planted

package weir

// plantedActive is the plant switched on in this process: none, in a build without the
// weir_planted tag (planted.go says what plants are).
const plantedActive = ""
