package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// writeErr is a Store write's error as the journal actor tells its
// requester. A write whose Store call timed out (an error wrapping
// context.DeadlineExceeded and no journal sentinel, such as a PostgreSQL
// call that waited out the Store's timeout) may or may not have landed: it
// wraps journal.ErrUnknownOutcome, so that it keeps a sentinel across the
// reply instead of becoming ERROR_CODE_INTERNAL.
func writeErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && journal.ErrorToProto(err).GetCode() == messages.ErrorCode_ERROR_CODE_INTERNAL {
		return fmt.Errorf("%w: %w", journal.ErrUnknownOutcome, err)
	}
	return err
}
