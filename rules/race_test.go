//go:build race

package rules

// raceDetector says whether the test binary was built with -race.
const raceDetector = true
