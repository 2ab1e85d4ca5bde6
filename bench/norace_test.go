//go:build !race

package bench

// raceDetector: see race_test.go.
const raceDetector = false
