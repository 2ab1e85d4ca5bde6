//go:build !linux || !cgo

package main

import (
	"context"
	"io"
)

// run needs dlopen through cgo on Linux, where NVIDIA's datacenter driver is.
func run(_ context.Context, o options, _ io.Writer) error {
	return &driverError{lib: o.lib, detail: "this gpuload is built without cgo or for a system other than Linux"}
}
