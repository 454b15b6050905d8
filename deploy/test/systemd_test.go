package deploytest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const unitPath = "../systemd/flowstate.service"

// unitSettings returns the unit's settings: name -> values, in order.
func unitSettings(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("not a setting: %q", line)
		}
		s[k] = append(s[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnitSandboxesTheWorker(t *testing.T) {
	s := unitSettings(t)
	for k, want := range map[string]string{
		"DynamicUser":             "yes",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"CapabilityBoundingSet":   "",
		"MemoryDenyWriteExecute":  "yes",
		"LockPersonality":         "yes",
		"KillSignal":              "SIGTERM",
		"TimeoutStopSec":          "5",
		"Restart":                 "on-failure",
	} {
		v, ok := s[k]
		if !ok || v[len(v)-1] != want {
			t.Errorf("%s=%v, want %q", k, v, want)
		}
	}
	if v := s["SystemCallFilter"]; len(v) == 0 || v[0] != "@system-service" {
		t.Errorf("SystemCallFilter=%v, want @system-service first", v)
	}
	if v := s["EnvironmentFile"]; len(v) != 1 {
		t.Errorf("EnvironmentFile=%v, want the one file of FLOWSTATE_* variables", v)
	}
	// The flags come from the environment file, not from the command line,
	// where a secret would show in process listings.
	if v := s["ExecStart"]; len(v) != 1 || strings.Contains(v[0], " ") {
		t.Errorf("ExecStart=%v, want the worker alone", v)
	}
}

// TestEnvFileNamesOnlyWorkerVariables keeps the example environment file to
// the worker's own variables, as its --help lists them.
func TestEnvFileNamesOnlyWorkerVariables(t *testing.T) {
	b, err := os.ReadFile("../systemd/flowstate.env")
	if err != nil {
		t.Fatal(err)
	}
	known := workerVariables(t)
	re := regexp.MustCompile(`(?m)^#?(FLOWSTATE_[A-Z_]+)=`)
	ms := re.FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Fatal("no FLOWSTATE_ variable in the environment file")
	}
	for _, m := range ms {
		if !known[m[1]] {
			t.Errorf("%s is not a variable of the worker", m[1])
		}
	}
}

// workerVariables are the FLOWSTATE_* variables that the worker's --help
// names (that of ../../bin/worker, which `make build` builds).
func workerVariables(t *testing.T) map[string]bool {
	t.Helper()
	var text []byte
	if bin, err := filepath.Abs("../../bin/worker"); err == nil {
		if _, err := os.Stat(bin); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			text, _ = exec.CommandContext(ctx, bin, "--help").Output()
		}
	}
	if len(text) == 0 {
		t.Skip("no bin/worker to list the worker's variables: `make build` builds it")
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`(FLOWSTATE_[A-Z_]+)`).FindAllSubmatch(text, -1) {
		vars[string(m[1])] = true
	}
	if len(vars) < 10 {
		t.Fatalf("only %d variables in the worker's --help", len(vars))
	}
	return vars
}

func TestUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian's systemd package has it)")
	}
	// verify checks that ExecStart names an executable: point it at this
	// test's binary instead of /usr/local/bin/flowstate-worker, which is
	// installed only on a real host.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unit := regexp.MustCompile(`(?m)^ExecStart=\S+`).ReplaceAllLiteral(src, []byte("ExecStart="+self))
	path := filepath.Join(t.TempDir(), "flowstate.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, sa, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
