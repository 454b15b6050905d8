package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text that came from outside (an epoch, a subject, a reason, a message) is
// data, never terminal control: the subcommands print it through outside
// or, for JSON, terminalJSON.

// maxOutsideText is the most runes of outside text a subcommand prints on
// one line (a reason, an epoch): longer text is cut with "…".
const maxOutsideText = 1024

// outside returns s for a terminal line: control, format (bidi overrides)
// and separator characters escaped, cut to maxOutsideText runes.
func outside(s string) string { return printable(s, maxOutsideText) }

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// terminalJSON returns JSON bytes safe to write to a terminal and equal to
// body as JSON: every character a terminal would act on (C0 and C1
// controls, DEL, bidi and other format characters, line and paragraph
// separators) written as a \u escape, an invalid byte as \ufffd. Those
// characters occur only inside strings, where the escape means the same
// character; the rest of body is kept as it is.
func terminalJSON(body []byte) []byte {
	clean := true
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n <= 1 || r != '\n' && !unicode.IsGraphic(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return body
	}
	out := make([]byte, 0, len(body)+64)
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = append(out, `\ufffd`...)
		case r == '\n' || unicode.IsGraphic(r):
			out = append(out, body[i:i+n]...)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			out = appendU(appendU(out, r1), r2)
		default:
			out = appendU(out, r)
		}
		i += n
	}
	return out
}

// appendU appends r, at most 0xFFFF, as a JSON \u escape.
func appendU(dst []byte, r rune) []byte {
	s := strconv.FormatInt(int64(r), 16)
	return append(append(dst, `\u`...), strings.Repeat("0", 4-len(s))+s...)
}

// forTerminal returns body for w: terminalJSON's escapes when w is a
// terminal, the exact bytes otherwise (a pipe, a file).
func forTerminal(w io.Writer, body []byte) []byte {
	if isTerminal(w) {
		return terminalJSON(body)
	}
	return body
}
