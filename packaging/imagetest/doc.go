// Package imagetest builds gpuscope's container image from
// packaging/Dockerfile with packaging/build.sh and runs it the way the
// README's `docker run` line does, on a private Docker daemon.
//
// It is its own package, not part of packaging's tests, because go test
// gives each package's tests ten minutes and a cold build of gpuscope in a
// container (GPUSCOPE_TEST_IMAGE_FROM_SOURCE=1) takes several on a small
// machine.
//
// Its test is behind the e2e build tag (scripts/test packaging).
package imagetest
