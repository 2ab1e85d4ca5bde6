//go:build race

package bench

// raceDetector says whether the test binary was built with -race, whose
// instrumented TSDB appends make the benchmarks' largest fixtures take
// longer to generate than a test run may last.
const raceDetector = true
