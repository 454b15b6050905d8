//go:build !chaosclock

package clock

// Default is the clock a process uses: Real. Only a build with the
// chaosclock tag (the robustness test's) can make it follow a control
// file (default_on.go).
func Default() Clock { return Real }
