//go:build !linux

package sim

import (
	"context"
	"errors"
)

type cpuBurner struct{}

func startCPUBurner(context.Context, burnerOptions) (*cpuBurner, error) {
	return nil, errors.New("burning CPU in a cgroup needs Linux")
}

func (*cpuBurner) pid() int      { return 0 }
func (*cpuBurner) sharing() bool { return false }
func (*cpuBurner) stop() error   { return nil }
