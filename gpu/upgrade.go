package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrRestartNeeded is the error Collector.Run returns when only a new
// process can read the GPUs again: the driver was upgraded in place, the
// kernel module now is the new version, and so is the library on disk, but
// this process still has the old library loaded. go-nvml cannot unload it:
// a failed nvmlInit leaves its dlopen reference behind (its Shutdown
// returns before closing the library when nvmlShutdown fails, as it does
// after a failed Init), and dlopen then hands back the old mapping. The
// process exits non-zero and its supervisor starts it again (the packaged
// unit's Restart=on-failure, Docker's --restart), which loads the new
// library.
//
// Where a restart would not help (the library on disk is new but the old
// kernel module is still loaded, until a reboot or module reload), the
// collector stays down with the reason instead: exiting would only restart
// gpuscope over and over, and take its other collectors with it.
var ErrRestartNeeded = errors.New("the driver was upgraded: restart gpuscope to load the new NVML library")

// restartVotes is how many opens in a row must find that a restart would
// load a library matching the kernel module: an upgrade replaces its files
// one by one.
const restartVotes = 2

// nvmlLibrary is the file name of NVML's library, as dlopen'ed.
const nvmlLibrary = "libnvidia-ml.so.1"

// restartWouldLoadMatch explains why restarting gpuscope would load an NVML
// library matching the kernel module when this process's does not, or
// returns "" where it would not, or that cannot be told. procRoot is where
// /proc is: its self/maps shows the library this process has mapped
// (libnvidia-ml.so.550.54.15, the version in its name), driver/nvidia/version
// the kernel module's version, and libnvidia-ml.so.1 beside the mapped file
// is what a new process would load.
func restartWouldLoadMatch(procRoot string) string {
	mapped := mappedNVMLLibrary(filepath.Join(procRoot, "self", "maps"))
	module := kernelModuleVersion(filepath.Join(procRoot, "driver", "nvidia", "version"))
	loaded := libraryVersion(mapped)
	if mapped == "" || module == "" || loaded == "" || loaded == module {
		return ""
	}
	onDisk, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(mapped), nvmlLibrary))
	if err != nil || libraryVersion(onDisk) != module {
		return ""
	}
	return fmt.Sprintf("NVML library %s is loaded, the kernel module and %s are %s", loaded, onDisk, module)
}

// mappedNVMLLibrary is the path of the NVML library mapped in the process
// whose maps file this is, "" if none.
func mappedNVMLLibrary(maps string) string {
	f, err := os.Open(maps)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "/")
		if i < 0 || !strings.Contains(line[i:], "libnvidia-ml.so") {
			continue
		}
		// A file replaced on disk since it was mapped.
		return strings.TrimSuffix(line[i:], " (deleted)")
	}
	return ""
}

// libraryVersion is the version a driver library's file name carries:
// 550.54.15 of libnvidia-ml.so.550.54.15; "" for another name.
func libraryVersion(path string) string {
	_, v, ok := strings.Cut(filepath.Base(path), ".so.")
	if !ok || !driverVersion.MatchString(v) {
		return ""
	}
	return v
}

var driverVersion = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)

// moduleVersion finds the version in /proc/driver/nvidia/version's first
// line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Thu
// Feb 22 01:44:30 UTC 2024", or "... Open Kernel Module for x86_64
// 580.65.06  Release Build ...".
var moduleVersion = regexp.MustCompile(`Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s`)

func kernelModuleVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	m := moduleVersion.FindSubmatch(append(line, ' '))
	if m == nil {
		return ""
	}
	return string(m[1])
}
