"""Names of the Starfish entries in Flower messages (server → client config, client → server reply)."""

ROUND = "starfish-round"  #: the Starfish round i the train message belongs to
LR = "starfish-lr"  #: η of the parties' update M_i = M_{i−1} − η·FedAvg(g)
ARCH = "starfish-arch"  #: architecture tag of the model hash
TASKS = "starfish-tasks"  #: task ids of an unlearning job the client should answer
TASKS_UNTIL = "starfish-tasks-until"  #: unix time after which the client stops waiting for them
REPLY = "starfish"  #: name of the receipt ConfigRecord in a reply
CLIENT_ID = "starfish-client-id"
SHARES = "starfish-shares"  #: content sha256 of the share each party acknowledged
ANSWERED = "starfish-tasks-answered"
UPLOAD_BYTES = "starfish-upload-bytes"  #: payload bytes the client sent to the two parties
SDK_SECONDS = "starfish-sdk-seconds"  #: wall time the client spent in the Starfish SDK (checks, sharing, upload)
UNLEARN_ME = "starfish-unlearn-me"  #: a ClientApp's reply asks for the unlearning of this client's own data
UNLEARN_JOB = "starfish-unlearn-job"  #: the job a client filed for itself ("" when none)
PROBE = "starfish-probe"  #: evaluation tasks: the operator's probe ("" = none), in the app's evaluate config
EVALUATED = "starfish-evaluations-answered"  #: evaluation tasks a client answered with shares
