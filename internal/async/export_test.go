package async

// What the external tests call of the queue's insides, to make interleavings that jobs on a
// running queue would make only by chance.
var (
	Decide = (*Queue).decide
	Fail   = (*Queue).fail
)
