package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// writeErr is a Store write's error as the journal actor tells its
// requester. A write whose Store call ended by a context's error and wraps
// no journal sentinel (a PostgreSQL call that waited out the Store's
// timeout, say) may or may not have landed: it wraps
// journal.ErrUnknownOutcome, so that the reply never says a context's
// error alone, which tells a caller that nothing was written.
func writeErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The context codes come after every sentinel's: a context's code
		// first means the error wraps no sentinel.
		switch journal.ErrorToProto(err).GetCode() {
		case messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, messages.ErrorCode_ERROR_CODE_CANCELED:
			return fmt.Errorf("%w: %w", journal.ErrUnknownOutcome, err)
		}
	}
	return err
}
