package clock

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ControlEnv names the control file of a process built with the
// chaosclock tag.
const ControlEnv = "FLOWSTATE_CHAOSCLOCK"

// ControlPoll is how often a Controlled clock following a file reads it.
const ControlPoll = 20 * time.Millisecond

// String is the control file's line: "offset=<duration> rate=<float>".
func (c Control) String() string {
	return fmt.Sprintf("offset=%v rate=%s", c.Offset, strconv.FormatFloat(c.Rate, 'g', -1, 64))
}

// ParseControl parses a control file's line.
func ParseControl(s string) (Control, error) {
	var c Control
	var haveOffset, haveRate bool
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("clock: %q is not key=value", f)
		case k == "offset" && !haveOffset:
			c.Offset, err = time.ParseDuration(v)
			haveOffset = true
		case k == "rate" && !haveRate:
			c.Rate, err = strconv.ParseFloat(v, 64)
			haveRate = true
		default:
			err = fmt.Errorf("clock: unknown or repeated key %q", k)
		}
		if err != nil {
			return Control{}, err
		}
	}
	if !haveOffset || !haveRate {
		return Control{}, fmt.Errorf("clock: %q needs offset=<duration> and rate=<float>, for example offset=-30s rate=0.5", s)
	}
	return c, c.Validate()
}

// WriteControl writes c into the control file at path, at once (a
// rename), so that a process never reads half of it.
func WriteControl(path string, c Control) error {
	if err := c.Validate(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.WriteString(c.String() + "\n")
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("clock: write %s: %w", path, cmpErr(werr, cerr))
	}
	return os.Rename(tmp.Name(), path)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Follow applies the control file at path to c every poll (of the real
// clock) until stop is closed; a missing or malformed file changes
// nothing. It returns when stop is closed.
func (c *Controlled) Follow(path string, poll time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(poll)
	defer t.Stop()
	var last []byte
	for {
		if b, err := os.ReadFile(path); err == nil && !bytes.Equal(b, last) {
			last = b
			if ctl, err := ParseControl(string(b)); err == nil {
				_ = c.Set(ctl)
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
