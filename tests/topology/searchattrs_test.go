//go:build topology

package topology

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// On a namespace Temporal has just created, a replica registers bae-go's
// search attributes and reports ready only once the frontend resolves them:
// the first message, sent the moment /readyz answers, is answered, and its
// session's workflow carries the attributes (not the memo-only fallback).
// Without the wait, a real server refuses that start for up to its
// namespace cache's refresh interval (10 s) with "Namespace ... has no
// mapping defined for search attribute BaeSessionState".
func TestFirstMessageOnFreshNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "bae-fresh-" + ids.New("")[:10]
	nc, err := client.NewNamespaceClient(client.Options{HostPort: temporalAddr})
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}))
	// The frontend caches the namespace once something reads it through
	// its registry (here a visibility count, retried until the new
	// namespace is found). Attributes added after that stay unknown until
	// the cache refreshes; a namespace nothing has read yet would be loaded
	// fresh, attributes and all, and hide the window.
	tc, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: ns})
	require.NoError(t, err)
	defer tc.Close()
	for {
		if _, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns}); err == nil {
			break
		}
		require.NoError(t, ctx.Err(), "namespace %s never answered", ns)
		time.Sleep(100 * time.Millisecond) // polling for the new namespace; nothing to wait on
	}

	c := startCluster(t, clusterOptions{Namespace: ns, Names: []string{"a"}})
	api := c.api("a")
	sid, sk := c.openSession(t, "a", c.profile(t))
	term := testenv.Terminal(t, api.RPC(t, sid, sk, sendRequest(1, "first on a fresh namespace")))
	require.Contains(t, term, "result", "%v", term)
	assert.Equal(t, "echo: first on a fresh namespace", firstText(message(term)))

	desc, err := tc.DescribeWorkflowExecution(ctx, sid, "")
	require.NoError(t, err)
	fields := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	assert.Contains(t, fields, workflows.SearchAttrProfileID, "the session's workflow carries the search attributes")
	assert.Contains(t, fields, workflows.SearchAttrState)
}
