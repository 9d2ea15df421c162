package workflows_test

import (
	"context"

	"github.com/bae-go/bae-go/workflows"
)

// beginThenCall is the stand-ins' CallProvider with Begin set, as
// CallProviderInput.Begin describes it: begin the turn, then make its first
// attempt with the primary provider.
func beginThenCall(ctx context.Context, in workflows.CallProviderInput,
	begin func(context.Context, workflows.BeginTurnInput) (workflows.BeginTurnResult, error),
	call func(context.Context, workflows.CallProviderInput) (workflows.CallProviderResult, error),
) (workflows.CallProviderResult, error) {
	b, err := begin(ctx, *in.Begin)
	if err != nil {
		return workflows.CallProviderResult{}, err
	}
	if b.Outcome != "" || len(b.Providers) == 0 {
		return workflows.CallProviderResult{Begin: &b}, nil
	}
	in.Begin, in.Provider = nil, b.Providers[0]
	res, err := call(ctx, in)
	res.Begin = &b
	return res, err
}
