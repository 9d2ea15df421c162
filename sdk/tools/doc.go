// Package tools holds the builtin client-side tools of the BAE Go SDK:
//
//   - scoped file access: ReadFile, WriteFile, ExploreFiles (FileConfig);
//   - shell tools: RunShellCommand and RunShellNamed, run by an Executor —
//     the session's remote sandbox (Remote, manual dispatch), a local Docker
//     container (LocalSandbox), or the harness host (Host) — plus
//     RemoteShellCommandSpec for Auto-mode remote dispatch;
//   - CLI subagents: LocalSubagents (launched and tracked by this harness)
//     and RemoteSubagents (a declaration the server launches).
//
// Expected failures — a path outside the allowlist, a missing file, an
// unknown subagent — are returned as in-band {"error": …} results the model
// can read and react to, not as handler errors.
package tools
