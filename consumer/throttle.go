package consumer

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of what a remote peer gets echoed into a log line or an error
// reply.
const (
	maxTokenEcho  = 64  // bytes of one subject token
	maxReasonEcho = 512 // bytes of a one-line reason
	ellipsis      = "…"
)

// logThrottled logs at most a few lines per second; the next line that gets
// through says how many were held back. It is the Worker's one rate-limiter
// (an internal/throttle.Throttle): every log line a remote peer can trigger
// goes through it.
func (w *Worker) logThrottled(level slog.Level, msg string, attrs ...any) {
	ok, suppressed := w.throttle.Allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	w.log.Log(context.Background(), level, msg, attrs...)
}

// cutToken returns subject with every token longer than maxTokenEcho bytes
// cut to that length and marked with an ellipsis, so that a 3,000-digit
// node id is not echoed whole.
func cutToken(subject string) string {
	long := false
	for tok := range strings.SplitSeq(subject, ".") {
		if len(tok) > maxTokenEcho {
			long = true
			break
		}
	}
	if !long {
		return subject
	}
	var b strings.Builder
	for i, tok := range strings.Split(subject, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(cut(tok, maxTokenEcho))
	}
	return b.String()
}

// cutReason bounds a one-line reason to maxReasonEcho bytes.
func cutReason(reason string) string { return cut(reason, maxReasonEcho) }

// cut returns s if it has at most n bytes, else its first n bytes (fewer
// if n falls inside a UTF-8 sequence) and an ellipsis.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// echoHeader returns outside text s for a header another program shows:
// cut to n bytes (cut), then every character a terminal would act on
// (controls, bidi and other format characters, separators) and every byte
// that is not UTF-8 written as a Go escape, \x1b or \u202e.
func echoHeader(s string, n int) string {
	s = cut(s, n)
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16) + strconv.FormatUint(uint64(s[i])&0xf, 16))
		case unicode.IsGraphic(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
