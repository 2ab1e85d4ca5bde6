//go:build !race

package rules

// raceDetector: see race_test.go.
const raceDetector = false
