package workload

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The owner of a cgroup whose path names none is read from the processes
// in it: the real uid (/proc/<pid>/status, Uid) of the lowest pid found,
// the oldest process as a rule (a container's init, a job's first task).
// Where to look depends on the runtime:
//
//   - docker, podman, containerd (rootful): the container's cgroup, and
//     first its "container" child where Podman's --cgroups=split puts
//     the container apart from conmon. What --user gave is the uid on the
//     host (no user-namespace remapping); without --user, root or the
//     image's USER. A rootless container's owner comes from its path
//     (pathUID), not from here: inside its user namespace a process's
//     uid is a subordinate one.
//   - slurm, cgroup v2 layout: the job's tasks, <job>/step_*/user/task_*,
//     for every cgroup of the job: its steps, its own slurmstepd
//     (step_*/slurm, run by root) and the job itself. The extern step is
//     left out: its one process, a sleep slurmstepd forks without
//     dropping privileges, is root's (Slurm's mgr.c
//     _spawn_job_container). Slurm's job info is not asked: that is a
//     socket call to slurmctld or slurmd, which the scrape path never
//     makes.
//
// Each found owner is kept with the cgroup's identity; a cgroup with no
// process yet is looked at again later (Cache).

// Bounds of one owner lookup: the directories read and the processes
// whose status is read, so that a huge job or a cgroup of thousands of
// processes costs no more than a few files.
const (
	maxOwnerDirs  = 64
	maxOwnerProcs = 8
)

// ownedByProcesses says which runtimes' owners are read from processes
// when the path names none.
func ownedByProcesses(runtime string) bool {
	switch runtime {
	case RuntimeDocker, RuntimePodman, RuntimeContainerd, RuntimeSlurm:
		return true
	}
	return false
}

// owner returns the uid, in decimal, that owns the cgroup at path of
// runtime; false when no process of it was found (the cgroup is empty,
// gone, or in no hierarchy u sees).
func (u *Users) owner(path, runtime string) (string, bool) {
	if u == nil {
		return "", false
	}
	base := path
	if runtime == RuntimeSlurm {
		job, ok := slurmJobDir(path)
		if !ok {
			return "", false
		}
		base = job
	}
	for _, root := range u.roots {
		dir, ok := under(root, base)
		if !ok {
			return "", false
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		var dirs []string
		if runtime == RuntimeSlurm {
			dirs = slurmTaskDirs(dir)
		} else {
			dirs = []string{filepath.Join(dir, "container"), dir}
		}
		// The first hierarchy that has the cgroup decides: on cgroup v1
		// every hierarchy holds the same processes.
		return u.ownerOf(dirs)
	}
	return "", false
}

// under joins root and a cgroup path, refusing one that leaves root.
func under(root, path string) (string, bool) {
	dir := filepath.Join(root, path)
	return dir, dir == root || strings.HasPrefix(dir, root+string(filepath.Separator))
}

// ownerOf returns the owner of the lowest pid of the first directory of
// dirs that lists processes.
func (u *Users) ownerOf(dirs []string) (string, bool) {
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		pids := parsePIDs(b)
		if len(pids) == 0 {
			continue
		}
		slices.Sort(pids)
		for _, pid := range pids[:min(len(pids), maxOwnerProcs)] {
			if uid, ok := u.processUID(pid); ok {
				return uid, true
			}
		}
	}
	return "", false
}

// slurmTaskDirs lists the task cgroups of a Slurm v2 job directory, at
// most maxOwnerDirs: step_*/user/task_* and each step_*/user, the extern
// step's left out.
func slurmTaskDirs(job string) []string {
	steps, err := os.ReadDir(job)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, s := range steps {
		if !s.IsDir() || !strings.HasPrefix(s.Name(), "step_") || s.Name() == "step_extern" {
			continue
		}
		user := filepath.Join(job, s.Name(), "user")
		tasks, err := os.ReadDir(user)
		if err != nil {
			continue
		}
		for _, t := range tasks {
			if t.IsDir() && strings.HasPrefix(t.Name(), "task_") {
				dirs = append(dirs, filepath.Join(user, t.Name()))
			}
		}
		dirs = append(dirs, user)
		if len(dirs) >= maxOwnerDirs {
			return dirs[:maxOwnerDirs]
		}
	}
	return dirs
}

// parsePIDs parses cgroup.procs: one pid a line. A 0 is a process outside
// the reader's pid namespace and is left out.
func parsePIDs(b []byte) []int {
	var pids []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processUID returns the real uid of pid, from /proc/<pid>/status.
func (u *Users) processUID(pid int) (string, bool) {
	b, err := os.ReadFile(filepath.Join(u.proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return "", false
	}
	return StatusUID(b)
}

// StatusUID returns the real uid, in decimal, of /proc/<pid>/status
// content: the first number of its Uid line.
func StatusUID(b []byte) (string, bool) {
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 || !isDigits(string(f[0]), 10) {
			return "", false
		}
		if _, err := strconv.ParseUint(string(f[0]), 10, 32); err != nil {
			return "", false
		}
		return string(f[0]), true
	}
	return "", false
}

// cgroupHierarchies returns the directories a cgroup path is looked up
// under: root itself on a unified (v2) machine, else the v1 hierarchies
// that hold every process (cpu first, as cAdvisor names containers by
// it), and the unified one of a hybrid machine last.
func cgroupHierarchies(root string) []string {
	root = filepath.Clean(root)
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return []string{root}
	}
	var out []string
	for _, h := range []string{"cpu", "cpu,cpuacct", "cpuacct", "memory", "pids", "systemd", "unified"} {
		p := filepath.Join(root, h)
		if fi, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil && !fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}
