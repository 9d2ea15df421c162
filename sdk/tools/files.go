package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bae-go/bae-go/sdk"
)

// FileConfig is the security boundary of the file tools. There is no
// permissive default: an empty AllowedDirs permits nothing.
type FileConfig struct {
	// AllowedDirs are the roots a path must resolve (symlinks included)
	// to be under.
	AllowedDirs []string
	// AllowedExtensions, when non-nil, is the only extensions permitted
	// (without the dot, case-insensitive).
	AllowedExtensions []string
	// DeniedExtensions are always rejected, even if allowed above. A
	// dotfile's suffix is its extension: "env" denies ".env".
	DeniedExtensions []string
	// AllowRegex, when set, must match the file name.
	AllowRegex *regexp.Regexp
	// DenyRegex rejects matching file names; it wins over AllowRegex.
	DenyRegex *regexp.Regexp
	// CreateParents lets write_file create missing parent directories.
	CreateParents bool
	// MaxReadBytes caps the size of a file read_file returns (default
	// DefaultMaxReadBytes); a larger file is an error result, never a
	// truncated read.
	MaxReadBytes int64
}

// DefaultMaxReadBytes is read_file's size cap when FileConfig.MaxReadBytes
// is unset: larger files would not fit a model's context anyway.
const DefaultMaxReadBytes = 1 << 20

func (c FileConfig) maxRead() int64 {
	if c.MaxReadBytes > 0 {
		return c.MaxReadBytes
	}
	return DefaultMaxReadBytes
}

// errHardLink refuses a file with more than one name: a hard link inside
// an allowed dir may share its inode with a file outside it, and no path
// check can tell them apart.
var errHardLink = errors.New("the file has more than one hard link; refusing to access it")

// checkOpened is the check on the opened file itself, after every path
// check: a regular file with a single link.
func checkOpened(f *os.File) (fs.FileInfo, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if linkCount(info) > 1 {
		return nil, errHardLink
	}
	return info, nil
}

// resolved is a permitted path: canonical form and the matched root.
type resolved struct {
	path string
	root string
}

// canonicalize resolves symlinks and ".." through the filesystem. For a
// path that does not exist yet (write_file), the longest existing prefix is
// resolved and the rest appended literally; ".." is never collapsed
// lexically, since that would skip a symlink component.
func canonicalize(p string) (string, error) {
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		p = wd + string(filepath.Separator) + p
	}
	real, err := filepath.EvalSymlinks(p)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	parent, base := filepath.Dir(p), filepath.Base(p)
	if parent == p || base == "." || base == ".." || base == string(filepath.Separator) {
		return "", err
	}
	rp, perr := canonicalize(parent)
	if perr != nil {
		return "", perr
	}
	return filepath.Join(rp, base), nil
}

// within reports whether p is root or below it.
func within(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// extension is the lowercased suffix after the last dot ("env" for ".env").
func extension(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return ""
	}
	return strings.ToLower(name[i+1:])
}

func normExt(e string) string { return strings.ToLower(strings.TrimPrefix(e, ".")) }

// resolve canonicalizes requested and finds the allowed dir it is under.
func (c FileConfig) resolve(requested string) (resolved, error) {
	canon, err := canonicalize(requested)
	if err != nil {
		return resolved{}, fmt.Errorf("cannot resolve %q: %v", requested, err)
	}
	for _, dir := range c.AllowedDirs {
		cdir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if cdir, err = filepath.Abs(cdir); err == nil && within(canon, cdir) {
			return resolved{path: canon, root: cdir}, nil
		}
	}
	return resolved{}, fmt.Errorf("%q is outside allowed_dirs", requested)
}

// validate is the single check the tools share, in the documented order:
// canonicalize, allowed dir, denied extension, allowed extension, deny
// regex, allow regex.
func (c FileConfig) validate(requested string) (resolved, error) {
	r, err := c.resolve(requested)
	if err != nil {
		return r, err
	}
	return r, c.checkName(r.path)
}

func (c FileConfig) checkName(canon string) error {
	name := filepath.Base(canon)
	ext := extension(name)
	if ext != "" && slices.ContainsFunc(c.DeniedExtensions, func(d string) bool { return normExt(d) == ext }) {
		return fmt.Errorf("extension .%s is denied", ext)
	}
	if c.AllowedExtensions != nil && (ext == "" || !slices.ContainsFunc(c.AllowedExtensions, func(a string) bool { return normExt(a) == ext })) {
		return errors.New("extension is not in allowed_extensions")
	}
	if c.DenyRegex != nil && c.DenyRegex.MatchString(name) {
		return errors.New("file name matches deny_regex")
	}
	if c.AllowRegex != nil && !c.AllowRegex.MatchString(name) {
		return errors.New("file name does not match allow_regex")
	}
	return nil
}

// inBand renders an expected failure as the JSON string {"error": …}.
func inBand(format string, args ...any) string {
	b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	return string(b)
}

func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func pathSchema(extra map[string]any, required ...string) map[string]any {
	props := map[string]any{"path": map[string]any{
		"type": "string", "description": "Filesystem path, checked against the tool's directory and file-name rules.",
	}}
	for k, v := range extra {
		props[k] = v
	}
	return map[string]any{"type": "object", "properties": props, "required": append([]string{"path"}, required...), "additionalProperties": false}
}

type fileInput struct {
	Path      *string `json:"path"`
	Content   *string `json:"content"`
	Recursive bool    `json:"recursive"`
}

func decodeFileInput(tool string, raw json.RawMessage) (fileInput, string, bool) {
	var in fileInput
	if err := json.Unmarshal(raw, &in); err != nil || in.Path == nil {
		return in, inBand("%s requires a string path", tool), false
	}
	return in, "", true
}

// openRoot opens the matched root so the final access cannot leave it
// even if a path component is swapped for a symlink after validation.
func openRoot(r resolved) (*os.Root, string, error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, "", err
	}
	rel, err := filepath.Rel(r.root, r.path)
	if err != nil {
		root.Close()
		return nil, "", err
	}
	return root, rel, nil
}

// ReadFile is the read_file tool: it returns {"path","content"} for a
// permitted UTF-8 text file.
func ReadFile(cfg FileConfig) sdk.Tool {
	return sdk.Tool{
		Name:        "read_file",
		Description: "Read a UTF-8 text file. The path must satisfy the tool's directory, extension and file-name rules; otherwise an error result explains why.",
		InputSchema: pathSchema(nil),
		Handler: func(_ context.Context, raw json.RawMessage) (any, error) {
			in, bad, ok := decodeFileInput("read_file", raw)
			if !ok {
				return bad, nil
			}
			r, err := cfg.validate(*in.Path)
			if err != nil {
				return inBand("path not permitted: %v", err), nil
			}
			root, rel, err := openRoot(r)
			if err != nil {
				return inBand("read failed: %v", err), nil
			}
			defer root.Close()
			// Refuse anything but a regular file before opening it (opening
			// a FIFO would block).
			if info, err := root.Stat(rel); err != nil {
				return inBand("read failed: %v", err), nil
			} else if !info.Mode().IsRegular() {
				return inBand("read failed: %s is not a regular file", *in.Path), nil
			}
			f, err := root.Open(rel)
			if err != nil {
				return inBand("read failed: %v", err), nil
			}
			defer f.Close()
			info, err := checkOpened(f)
			if err != nil {
				return inBand("read failed: %v", err), nil
			}
			limit := cfg.maxRead()
			if info.Size() > limit {
				return inBand("read failed: %s is %d bytes, larger than the %d-byte read limit", *in.Path, info.Size(), limit), nil
			}
			// The file may grow after Stat: read at most one byte past the cap.
			data, err := io.ReadAll(io.LimitReader(f, limit+1))
			if err != nil {
				return inBand("read failed: %v", err), nil
			}
			if int64(len(data)) > limit {
				return inBand("read failed: %s is larger than the %d-byte read limit", *in.Path, limit), nil
			}
			if !utf8.Valid(data) {
				return inBand("read failed: %s is not UTF-8 text", *in.Path), nil
			}
			return jsonText(map[string]string{"path": *in.Path, "content": string(data)})
		},
	}
}

// WriteFile is the write_file tool: it writes content to a permitted path
// and returns {"path","bytes_written"}. A missing parent directory is
// refused unless cfg.CreateParents.
func WriteFile(cfg FileConfig) sdk.Tool {
	return sdk.Tool{
		Name:        "write_file",
		Description: "Write a UTF-8 text file. The path must satisfy the tool's rules and, unless parent creation is enabled, its directory must exist.",
		InputSchema: pathSchema(map[string]any{"content": map[string]any{"type": "string", "description": "The UTF-8 text to write."}}, "content"),
		Handler: func(_ context.Context, raw json.RawMessage) (any, error) {
			in, bad, ok := decodeFileInput("write_file", raw)
			if !ok {
				return bad, nil
			}
			content := ""
			if in.Content != nil {
				content = *in.Content
			}
			r, err := cfg.validate(*in.Path)
			if err != nil {
				return inBand("path not permitted: %v", err), nil
			}
			root, rel, err := openRoot(r)
			if err != nil {
				return inBand("write failed: %v", err), nil
			}
			defer root.Close()
			if dir := filepath.Dir(rel); dir != "." {
				if _, err := root.Stat(dir); errors.Is(err, fs.ErrNotExist) {
					if !cfg.CreateParents {
						return inBand("path not permitted: parent directory does not exist (enable CreateParents to allow)"), nil
					}
					if err := root.MkdirAll(dir, 0o755); err != nil {
						return inBand("could not create parent directories: %v", err), nil
					}
				}
			}
			// Opened without O_TRUNC so a multiply-linked file is refused
			// before a single byte of it changes.
			f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				return inBand("write failed: %v", err), nil
			}
			defer f.Close()
			if _, err := checkOpened(f); err != nil {
				return inBand("write failed: %v", err), nil
			}
			if err := f.Truncate(0); err != nil {
				return inBand("write failed: %v", err), nil
			}
			if _, err := f.Write([]byte(content)); err != nil {
				return inBand("write failed: %v", err), nil
			}
			if err := f.Close(); err != nil {
				return inBand("write failed: %v", err), nil
			}
			return jsonText(map[string]any{"path": *in.Path, "bytes_written": len(content)})
		},
	}
}

// FileEntry is one explore_files listing entry.
type FileEntry struct {
	Path      string `json:"path"` // relative to the matched allowed dir
	IsDir     bool   `json:"is_dir"`
	SizeBytes int64  `json:"size_bytes"`
}

// ExploreFiles is the explore_files tool: it lists a directory under an
// allowed dir (recursively with "recursive": true) as a sorted JSON array of
// FileEntry. Each entry passes the same checks read_file applies; a symlink
// leading outside the root is left out.
func ExploreFiles(cfg FileConfig) sdk.Tool {
	return sdk.Tool{
		Name:        "explore_files",
		Description: "List the files under a permitted directory (non-recursive unless recursive is true). Only entries read_file would accept are listed.",
		InputSchema: pathSchema(map[string]any{"recursive": map[string]any{"type": "boolean", "description": "Descend into subdirectories (default false)."}}),
		Handler: func(ctx context.Context, raw json.RawMessage) (any, error) {
			in, bad, ok := decodeFileInput("explore_files", raw)
			if !ok {
				return bad, nil
			}
			// The listed directory is checked for its root only: extension
			// and name rules are about the entries.
			r, err := cfg.resolve(*in.Path)
			if err != nil {
				return inBand("path not permitted: %v", err), nil
			}
			info, err := os.Stat(r.path)
			if err != nil {
				return inBand("explore failed: %v", err), nil
			}
			if !info.IsDir() {
				return inBand("%q is not a directory", *in.Path), nil
			}
			entries := []FileEntry{}
			if err := cfg.walk(ctx, r.path, r.root, in.Recursive, &entries); err != nil {
				return nil, err
			}
			slices.SortFunc(entries, func(a, b FileEntry) int { return strings.Compare(a.Path, b.Path) })
			return jsonText(entries)
		},
	}
}

// walk lists dir. Symlinks are resolved for the checks but never descended
// into, so a link cycle cannot loop the walk.
func (c FileConfig) walk(ctx context.Context, dir, root string, recursive bool, out *[]FileEntry) error {
	items, err := os.ReadDir(dir)
	if err != nil {
		return nil // unreadable directory: nothing to list
	}
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(dir, it.Name())
		target, err := filepath.EvalSymlinks(p)
		if err != nil || !within(target, root) {
			continue
		}
		info, err := os.Stat(target)
		if err != nil {
			continue
		}
		// Listed only if read_file would accept it (so with
		// AllowedExtensions set, directories are walked but not listed).
		if c.checkName(target) == nil {
			rel, _ := filepath.Rel(root, p)
			e := FileEntry{Path: filepath.ToSlash(rel), IsDir: info.IsDir()}
			if !e.IsDir {
				e.SizeBytes = info.Size()
			}
			*out = append(*out, e)
		}
		if recursive && it.IsDir() {
			if err := c.walk(ctx, p, root, true, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// FileTools returns read_file, write_file and explore_files sharing cfg.
func FileTools(cfg FileConfig) []sdk.Tool {
	return []sdk.Tool{ReadFile(cfg), WriteFile(cfg), ExploreFiles(cfg)}
}
