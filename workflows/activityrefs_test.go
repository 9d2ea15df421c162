package workflows_test

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bae-go/bae-go/workflows"
)

// Each ref the workflow calls runs the Activities method it is typed by:
// the name it sends is that method's name, which RegisterActivities uses.
func TestActivityRefsNameTheirMethods(t *testing.T) {
	refs := workflows.ActivityRefs()
	assert.Len(t, refs, reflect.TypeFor[workflows.Activities]().NumMethod(), "every activity has a ref")
	for name, method := range refs {
		full := runtime.FuncForPC(reflect.ValueOf(method).Pointer()).Name()
		assert.Equal(t, name, full[strings.LastIndex(full, ".")+1:], "ref %s calls %s", name, full)
	}
}
