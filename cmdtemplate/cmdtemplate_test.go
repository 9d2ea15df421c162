package cmdtemplate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAcceptsBarePlaceholders(t *testing.T) {
	for src, params := range map[string][]string{
		"grep {pattern} {file} | head -n {n} {file}": {"pattern", "file", "n"},
		"printf %s {msg}":                   {"msg"},
		"cat; echo model={model}":           {"model"},
		"cat; echo ' via '{model}":          {"model"},
		"echo 'a' {x}":                      {"x"},
		"echo $(printf %s {x}) {y}":         {"x", "y"},
		"echo $HOME {x} # trailing comment": {"x"},
		"echo \"$(date)\" {x}":              {"x"},
		"sort -o out -- {file} > {dest}":    {"file", "dest"},
		"true":                              nil,
	} {
		tpl, err := Parse(src)
		require.NoError(t, err, src)
		assert.Equal(t, params, tpl.Params(), src)
		assert.Equal(t, src, tpl.String())
	}
}

func TestParseRefusesUnsafePlaceholders(t *testing.T) {
	for src, want := range map[string]string{
		`echo "{msg}"`:                "inside double quotes",
		`echo "hi $(echo {msg})"`:     "inside double quotes",
		`echo '{msg}'`:                "inside single quotes",
		`awk '{print}'`:               "inside single quotes",
		"echo $(( {n} + 1 ))":         "arithmetic",
		"(( {n} > 3 )) && echo big":   "arithmetic",
		"echo $[ {n} ]":               "arithmetic",
		"[[ {n} -eq 1 ]] && echo one": "[[ ]]",
		"echo hi # {x}":               "inside a comment",
		"cat <<EOF\n{x}\nEOF":         "here-document",
		`echo \{x}`:                   "backslash",
		"echo ${x}":                   "right after $",
		"echo `echo {x}`":             "backquote",
		"echo `date`":                 "backquote",
		"echo {}":                     "not an identifier",
		"echo {a b}":                  "not an identifier",
		"echo {a":                     "unterminated {",
		"echo a}":                     "unmatched }",
		"echo 'a":                     "unterminated single quote",
		`echo "a`:                     "unterminated double quote",
		"echo $(date {x}":             "unterminated",
	} {
		_, err := Parse(src)
		if assert.Error(t, err, src) {
			assert.Contains(t, err.Error(), want, src)
		}
	}
}

func TestExpandQuotesOnce(t *testing.T) {
	tpl, err := Parse("echo {a}{b}")
	require.NoError(t, err)
	out, err := tpl.Expand(map[string]string{"a": "{b}", "b": "x"})
	require.NoError(t, err)
	assert.Equal(t, `echo '{b}''x'`, out, "a substituted value is not re-read as a placeholder")
	assert.Equal(t, `'it'\''s'`, Quote("it's"))
	_, err = tpl.Expand(map[string]string{"a": "x"})
	assert.ErrorContains(t, err, "missing value for {b}")
	_, err = tpl.Expand(map[string]string{"a": "x\x00y", "b": ""})
	var ve *ValueError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "a", ve.Param)
}

func TestExpandRefusesOptionValuesWhereTheyStartAWord(t *testing.T) {
	refused := []string{"sort {file}", "ls -l {file}", "echo {a}{file}", "echo ''{file}", "x=1; sort -- y; sort {file}", "sort -- $(cat {file})",
		// An unquoted expansion may be empty: the value still begins the word.
		"sort $PREFIX{file}", "sort $1{file}", "sort $@{file}", "sort $A$_b2{file}", "sort $(true){file}", "sort $#{file}"}
	for _, src := range refused {
		tpl, err := Parse(src)
		require.NoError(t, err, src)
		vals := map[string]string{"file": "-o/tmp/x", "a": ""}
		_, err = tpl.Expand(vals)
		var ve *ValueError
		require.ErrorAs(t, err, &ve, src)
		assert.Equal(t, "file", ve.Param)
		assert.Contains(t, err.Error(), `begins with "-"`)
	}
	allowed := []string{"sort -- {file}", "grep -e x -- {file} | sort", "echo --file={file}", "cat <{file}", "echo x{file}", "git log -- a {file}",
		"sort -- $PREFIX{file}", "echo $P/{file}", "echo $10{file}", "echo x$P{file}"}
	for _, src := range allowed {
		tpl, err := Parse(src)
		require.NoError(t, err, src)
		_, err = tpl.Expand(map[string]string{"file": "-o/tmp/x"})
		assert.NoError(t, err, src)
	}
}

func TestSubagentTemplates(t *testing.T) {
	tpl, err := ParseSubagent("claude --model {model} -p -- {prompt}", PromptViaArg)
	require.NoError(t, err)
	cmd, err := tpl.ExpandSubagent("claude-sonnet-4-5", "- fix it")
	require.NoError(t, err)
	assert.Equal(t, `claude --model 'claude-sonnet-4-5' -p -- '- fix it'`, cmd)

	for _, m := range []string{"claude-3-5-sonnet-v2@20241022", "anthropic.claude-3-5-sonnet-20240620-v1:0", "qwen2.5-coder:7b", "openrouter/meta-llama/llama-3.1-8b-instruct:free", "o3", "gpt-5"} {
		assert.NoError(t, CheckModel(m), m)
	}
	for _, m := range []string{"", "-oops", "--help", "a b", "a;id", "$(id)", "`id`", "a'b", "a\"b", "a\nb", "a|b", "a>b", strings.Repeat("m", 129)} {
		assert.Error(t, CheckModel(m), m)
		_, err := tpl.ExpandSubagent(m, "p")
		assert.Error(t, err, m)
	}

	for src, via := range map[string]string{
		"cli {prompt} {prompt}": PromptViaArg,
		"cli {model}":           PromptViaArg,
		"cli {prompt}":          PromptViaStdin,
		"cli {other}":           PromptViaStdin,
		`cli "{model}"`:         PromptViaStdin,
		"cli":                   "file",
	} {
		_, err := ParseSubagent(src, via)
		assert.Error(t, err, src)
	}
	stdin, err := ParseSubagent("cli --model {model}", PromptViaStdin)
	require.NoError(t, err)
	cmd, err = stdin.ExpandSubagent("m1", "the prompt {model}")
	require.NoError(t, err)
	assert.Equal(t, "cli --model 'm1'", cmd, "a stdin prompt never reaches the command line")
}

// shells are the POSIX shells on this machine the attacks are run against.
func shells(t *testing.T) []string {
	var out []string
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/bin/dash", "/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(sh); err == nil {
			out = append(out, sh)
		}
	}
	require.NotEmpty(t, out)
	return out
}

func runShell(t *testing.T, sh, dir, cmd string) (string, error) {
	args := []string{"-c", cmd}
	if filepath.Base(sh) == "busybox" {
		args = append([]string{"sh"}, args...)
	}
	c := exec.Command(sh, args...)
	c.Dir = dir
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestAttacksDoNotGetThrough runs each attack of a model-controlled value
// against real shells: a value that tries to end its quotes, run a command
// or become an option either stays one literal argument or is refused.
func TestAttacksDoNotGetThrough(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(filepath.Base(sh), func(t *testing.T) {
			dir := t.TempDir()
			pwned := filepath.Join(dir, "pwned")
			payloads := []string{
				"$(touch " + pwned + ")",
				"`touch " + pwned + "`",
				"'; touch " + pwned + "; '",
				"\"; touch " + pwned + "; \"",
				"x\ntouch " + pwned,
				"a[$(touch " + pwned + ")]",
			}

			// echo "{msg}": the quoted placeholder let $(…) run; it is now refused
			// when the template is defined, and the bare form prints the value.
			_, err := Parse(`echo "{msg}"`)
			require.ErrorContains(t, err, "inside double quotes")
			tpl, err := Parse("printf %s {msg}")
			require.NoError(t, err)
			for _, p := range payloads {
				cmd, err := tpl.Expand(map[string]string{"msg": p})
				require.NoError(t, err)
				out, err := runShell(t, sh, dir, cmd)
				require.NoError(t, err, out)
				assert.Equal(t, p, out, "one literal argument")
				assert.NoFileExists(t, pwned, p)
			}

			// sort {file} with -o<path>: the value would have been sort's output
			// option and written the file; it is now refused, and after "--" it
			// is only a file name.
			target := filepath.Join(dir, "written")
			tpl, err = Parse("sort {file}")
			require.NoError(t, err)
			_, err = tpl.Expand(map[string]string{"file": "-o" + target})
			require.ErrorContains(t, err, `begins with "-"`)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "in"), []byte("b\na\n"), 0o644))
			naive := "sort -o" + target + " in" // what the old expansion ran, for contrast
			_, err = runShell(t, sh, dir, naive)
			require.NoError(t, err)
			require.FileExists(t, target, "the attack works when nothing stops it")
			require.NoError(t, os.Remove(target))
			tpl, err = Parse("sort -- {file} in")
			require.NoError(t, err)
			cmd, err := tpl.Expand(map[string]string{"file": "-o" + target})
			require.NoError(t, err)
			_, err = runShell(t, sh, dir, cmd)
			assert.Error(t, err, "sort looks for a file named -o…")
			assert.NoFileExists(t, target)

			// sort $PREFIX{file} and sort $1{file}: with the expansion empty,
			// the quoted value alone was the word, so -o<path> was an option
			// again. Refused like sort {file}.
			for _, src := range []string{"sort $PREFIX{file} in", "sort $1{file} in"} {
				tpl, err = Parse(src)
				require.NoError(t, err)
				_, err = tpl.Expand(map[string]string{"file": "-o" + target})
				require.ErrorContains(t, err, `begins with "-"`, src)
				naive := strings.Replace(src, "{file}", Quote("-o"+target), 1)
				_, err = runShell(t, sh, dir, "unset PREFIX; "+naive)
				require.NoError(t, err)
				require.FileExists(t, target, "the attack works when nothing stops it: %s", src)
				require.NoError(t, os.Remove(target))
			}

			// A model name with shell metacharacters never reaches the shell.
			sub, err := ParseSubagent("printf %s {model}", PromptViaStdin)
			require.NoError(t, err)
			for _, p := range append(payloads, "m; touch "+pwned, "-o"+target) {
				_, err := sub.ExpandSubagent(p, "")
				assert.ErrorContains(t, err, "is not a model name", p)
			}
			cmd, err = sub.ExpandSubagent("qwen2.5-coder:7b", "")
			require.NoError(t, err)
			out, err := runShell(t, sh, dir, cmd)
			require.NoError(t, err)
			assert.Equal(t, "qwen2.5-coder:7b", out)
		})
	}
}
