// Command pgrep is the one use Katib's metrics collector makes of procps' pgrep: `pgrep -P PPID` (gopsutil's
// Process.Children, which the collector calls to stop an early-stopped trial's training process). The collector's
// image here is its binary alone (no procps): this prints the pid of every process whose parent is PPID, one per
// line, and exits 1 when there is none, as pgrep does.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "-P" {
		fmt.Fprintln(os.Stderr, "usage: pgrep -P PPID")
		os.Exit(2)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgrep:", err)
		os.Exit(3)
	}
	found := false
	for _, entry := range entries {
		if _, err := strconv.Atoi(entry.Name()); err != nil {
			continue
		}
		if parentOf(entry.Name()) == os.Args[2] {
			fmt.Println(entry.Name())
			found = true
		}
	}
	if !found {
		os.Exit(1)
	}
}

// parentOf reads the parent pid from /proc/PID/stat ("pid (comm) state ppid ..."); comm may hold spaces and
// parentheses, so the fields are counted from the last ')'. "" when the process is gone.
func parentOf(pid string) string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	text := string(stat)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}
