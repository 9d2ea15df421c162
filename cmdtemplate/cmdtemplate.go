// Package cmdtemplate is the one home of command templates: a POSIX shell
// command line with {name} placeholders whose values come from a model or
// another untrusted caller. The Go SDK's RunShellNamed and CLI subagents and
// the server's remote subagents all parse and expand templates here.
//
// A value is always substituted as one single-quoted word, which is safe
// only where the shell reads that word as plain text. So Parse refuses a
// template that puts a placeholder where single quotes do not protect it:
// inside single or double quotes, backquotes, an arithmetic expression or
// [[ ]], a comment or a here-document, or right after a backslash or a $.
// And since one literal word is still an option to the command when it
// begins with "-", Expand refuses such a value for a placeholder that starts
// a word (or follows nothing in its word but quotes and unquoted $name, $1,
// $( ) expansions, which may be empty: "sort $PREFIX{file}"), unless the
// template ended the command's options with a "--" word before it
// ("sort -- {file}"). The template decides what a value means: a
// command that runs its argument as code (sh -c, eval, an awk program) runs
// the value as code.
package cmdtemplate

import (
	"fmt"
	"slices"
	"strings"
)

// Template is a parsed command template.
type Template struct {
	src    string
	parts  []part
	params []string
}

// part is literal text (name == "") or a placeholder.
type part struct {
	lit  string
	name string
	// dashOK: a value beginning with "-" cannot become an option here (the
	// placeholder does not start a word, or follows "--").
	dashOK bool
}

// String returns the template's source.
func (t *Template) String() string { return t.src }

// Params lists the placeholder names in order of first appearance, once each.
func (t *Template) Params() []string { return slices.Clone(t.params) }

// Has reports whether the template contains {name}.
func (t *Template) Has(name string) bool { return slices.Contains(t.params, name) }

// ValueError is a value Expand refuses; Param names its placeholder.
type ValueError struct {
	Param  string
	Reason string
}

func (e *ValueError) Error() string { return fmt.Sprintf("value for {%s} %s", e.Param, e.Reason) }

// Expand substitutes every placeholder with its single-quoted value, in one
// left-to-right pass, so a value is never read again as a placeholder. A
// missing value is an error; a refused value is a *ValueError.
func (t *Template) Expand(values map[string]string) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v, ok := values[p.name]
		if !ok {
			return "", fmt.Errorf("command template %q: missing value for {%s}", t.src, p.name)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return "", &ValueError{Param: p.name, Reason: "contains a NUL byte, which no command argument can hold"}
		}
		if !p.dashOK && strings.HasPrefix(v, "-") {
			return "", &ValueError{Param: p.name, Reason: `begins with "-" and would be read as an option; ` +
				`pass a value that does not begin with "-" (a template accepts one only after a "--" word)`}
		}
		b.WriteString(Quote(v))
	}
	return b.String(), nil
}

// Quote wraps s in single quotes for a POSIX shell, so it is one literal
// word wherever Parse allows a placeholder.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// context kinds of the scanner's stack.
type kind int

const (
	kTop     kind = iota // unquoted, at the top level
	kSub                 // unquoted inside $( ) or a ( ) subshell
	kSingle              // '…'
	kDouble              // "…"
	kArith               // $(( )) or (( )): read as if double-quoted
	kBracket             // $[ ]: old bash arithmetic
	kTest                // [[ ]]: bash evaluates operands of -eq etc. as arithmetic
)

type frame struct {
	kind  kind
	depth int // open parentheses inside an arithmetic frame
	// wordStart: the current word has no unquoted constant character yet,
	// so a value placed here begins the word.
	wordStart bool
	begun     bool            // the current word has any character or quote
	endOpts   bool            // a "--" word ended options in this command
	word      strings.Builder // the current word's unquoted literal text
	plain     bool            // the current word is unquoted literal text only
}

func (f *frame) newWord() {
	f.word.Reset()
	f.plain = true
	f.wordStart = true
	f.begun = false
}

// endWord closes the current word; a bare "--" ends options.
func (f *frame) endWord() {
	if f.plain && f.word.String() == "--" {
		f.endOpts = true
	}
	f.newWord()
}

// newCommand starts a new simple command (after ; & | newline or a paren).
func (f *frame) newCommand() {
	f.newWord()
	f.endOpts = false
}

func (f *frame) literal(c byte) {
	f.word.WriteByte(c)
	f.wordStart = false
	f.begun = true
}

// nonPlain marks the word as more than unquoted literal text. It may still
// be empty (” or an empty $x), so a placeholder after it still starts the
// word.
func (f *frame) nonPlain() {
	f.plain = false
	f.begun = true
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// Parse checks a template and returns it parsed. Placeholders are {name}
// with name an identifier; a brace that is not part of one is an error, so
// a typo cannot silently become literal text.
func Parse(src string) (*Template, error) {
	bad := func(format string, args ...any) (*Template, error) {
		return nil, fmt.Errorf("command template %q: %s", src, fmt.Sprintf(format, args...))
	}
	t := &Template{src: src}
	top := &frame{kind: kTop}
	top.newCommand()
	stack := []*frame{top}
	push := func(k kind) *frame {
		f := &frame{kind: k}
		f.newCommand()
		stack = append(stack, f)
		return f
	}
	pop := func() { stack = stack[:len(stack)-1] }
	inside := func(k kind) bool {
		return slices.ContainsFunc(stack, func(f *frame) bool { return f.kind == k })
	}
	comment, heredoc := false, false
	litStart := 0
	for i := 0; i < len(src); {
		f := stack[len(stack)-1]
		c := src[i]
		switch c {
		case '}':
			return bad("unmatched }")
		case '{':
			j := strings.IndexByte(src[i:], '}')
			if j < 0 {
				return bad("unterminated {")
			}
			name := src[i+1 : i+j]
			if !isIdent(name) {
				return bad("placeholder {%s} is not an identifier", name)
			}
			var where string
			switch {
			case comment:
				where = "is inside a comment"
			case heredoc:
				where = "follows a here-document (<<), whose body is not quoted"
			case inside(kSingle):
				where = "is inside single quotes"
			case inside(kDouble):
				where = "is inside double quotes"
			case inside(kArith), inside(kBracket), inside(kTest):
				where = "is inside an arithmetic expression or [[ ]], which evaluates its text"
			}
			if where != "" {
				return bad("placeholder {%s} %s; write it bare: every value is substituted as one single-quoted word", name, where)
			}
			t.parts = append(t.parts, part{lit: src[litStart:i]}, part{name: name, dashOK: !f.wordStart || f.endOpts})
			if !slices.Contains(t.params, name) {
				t.params = append(t.params, name)
			}
			f.nonPlain()
			i += j + 1
			litStart = i
			continue
		}
		if comment {
			if c == '\n' {
				comment = false
				f.newCommand()
			}
			i++
			continue
		}
		next := func(k int) byte {
			if i+k < len(src) {
				return src[i+k]
			}
			return 0
		}
		switch f.kind {
		case kSingle:
			if c == '\'' {
				pop()
			}
			i++
			continue
		case kArith:
			switch {
			case c == '(':
				f.depth++
			case c == ')' && f.depth > 0:
				f.depth--
			case c == ')' && next(1) == ')':
				pop()
				i++
			case c == ')':
				return bad("unbalanced ) in an arithmetic expression")
			}
			i++
			continue
		case kBracket:
			if c == ']' {
				pop()
			}
			i++
			continue
		case kTest:
			if c == ']' && next(1) == ']' {
				pop()
				i++
			}
			i++
			continue
		}
		// Unquoted (top, sub) or double-quoted text.
		switch {
		case c == '\\':
			if next(1) == '{' {
				return bad("a placeholder right after a backslash would lose its opening quote")
			}
			if f.kind != kDouble && next(1) != '\n' {
				f.literal(next(1)) // an escaped character is a constant one
				f.plain = false
			}
			i += 2
			continue
		case c == '`':
			return bad("backquote command substitution is not supported; use $( )")
		case c == '$':
			switch {
			case next(1) == '{':
				return bad("a placeholder right after $ is parameter-expansion syntax; write $name, or put a space before the placeholder")
			case next(1) == '(' && next(2) == '(':
				f.nonPlain()
				push(kArith)
				i += 3
			case next(1) == '(':
				f.nonPlain()
				push(kSub)
				i += 2
			case next(1) == '[':
				f.nonPlain()
				push(kBracket)
				i += 2
			default:
				// $name, $1, $@ and the like: unquoted, the expansion may be
				// empty, so a placeholder after it can still begin the word
				// ("sort $PREFIX{file}" with PREFIX unset is "sort {file}").
				// Its characters are not constant ones: wordStart stays.
				f.nonPlain()
				i += 1 + paramLen(src[i+1:])
			}
			continue
		case c == '"':
			if f.kind == kDouble {
				pop()
			} else {
				f.nonPlain()
				push(kDouble)
			}
			i++
			continue
		}
		if f.kind == kDouble {
			i++
			continue
		}
		switch {
		case c == '\'':
			f.nonPlain()
			push(kSingle)
		case c == '(' && next(1) == '(':
			f.nonPlain()
			push(kArith)
			i++
		case c == '(':
			f.newCommand()
			push(kSub)
		case c == ')':
			if f.kind == kSub {
				pop()
				stack[len(stack)-1].nonPlain()
			} else {
				f.newCommand() // a case pattern's )
			}
		case c == ';' || c == '&' || c == '|' || c == '\n':
			f.endWord()
			f.newCommand()
		case isBlank(c):
			f.endWord()
		case c == '#' && !f.begun:
			comment = true
		case c == '<' && next(1) == '<' && next(2) == '<':
			// A here-string's word is an ordinary word.
			f.endWord()
			f.wordStart = false
			i += 2
		case c == '<' && next(1) == '<':
			heredoc = true
			f.endWord()
			f.wordStart = false
			i++
		case c == '<' || c == '>':
			// A redirection's target is a file name, never an option.
			f.endWord()
			f.wordStart = false
		case c == '[' && next(1) == '[' && f.wordStart && (isBlank(next(2)) || next(2) == 0):
			f.nonPlain()
			push(kTest)
			i++
		default:
			f.literal(c)
		}
		i++
	}
	if len(stack) == 1 {
		t.parts = append(t.parts, part{lit: src[litStart:]})
		return t, nil
	}
	switch stack[len(stack)-1].kind {
	case kSingle:
		return bad("unterminated single quote")
	case kDouble:
		return bad("unterminated double quote")
	default:
		return bad("unterminated $( ), ( ), (( )), $[ ] or [[ ]]")
	}
}

// paramLen is the length of the parameter name right after a $: an
// identifier, one digit, or one special parameter (@ * # ? $ ! -); 0 when
// none starts s (a lone $ is a literal $).
func paramLen(s string) int {
	if s == "" {
		return 0
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9', strings.IndexByte("@*#?$!-", c) >= 0:
		return 1
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		n := 1
		for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9') {
			n++
		}
		return n
	}
	return 0
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !(r >= 'a' && r <= 'z') && !(r >= 'A' && r <= 'Z') && !(i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
