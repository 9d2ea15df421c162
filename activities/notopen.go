package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// NotOpenInterceptor makes an activity that the store refused because the
// session is no longer open (a close won the session lock: its turn's next
// event would follow the session.close) fail at once, without retries, as
// workflows.ErrSessionNotOpen. A retry could only be refused again, and a
// provider attempt retried would call the provider again for nothing.
func NotOpenInterceptor() interceptor.WorkerInterceptor { return &notOpenWorker{} }

type notOpenWorker struct {
	interceptor.WorkerInterceptorBase
}

func (*notOpenWorker) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &notOpenInbound{}
	i.Next = next
	return i
}

type notOpenInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (i *notOpenInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := i.Next.ExecuteActivity(ctx, in)
	var notOpen *store.NotOpenError
	if err != nil && errors.As(err, &notOpen) {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrSessionNotOpen, nil, notOpen.State)
	}
	return res, err
}
