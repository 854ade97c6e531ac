"""The glossary of the job report page: every technical term the page uses, in plain words.

A term on the page is a link to its entry (`term`); the glossary section (`glossary`)
lists every entry with the anchor `term-<key>`. The revealed kinds of the job report
(`server.jobs.job_report.revealed_section`) are entries under their own names, so the
"What the computation revealed" table links each kind it shows.
"""

from __future__ import annotations

from html import escape

from harness.report_page.markup import Html, section

#: key → (name as the glossary shows it, explanation); the key is the anchor `term-<key>`
TERMS: dict[str, tuple[str, str]] = {
    "2pc": (
        "2PC (two-party computation)",
        "party0 and party1 each hold one half (a share) of every stored client contribution and compute on "
        "the halves together by exchanging messages, so that neither operator ever sees a client's "
        "contribution. Only the values listed under “What the computation revealed” are ever opened.",
    ),
    "share": (
        "share",
        "One operator's half of a client's stored contribution: random-looking numbers that add up, with the "
        "other operator's half, to the contribution (modulo 2^64). One half alone says nothing about it.",
    ),
    "operators": (
        "party0, party1 (operators)",
        "The two independent operators of the service. Each stores one share of every client's contributions, "
        "runs its half of each unlearning job, deletes its shares of a forgotten client and signs the "
        "erasure certificate with its own key.",
    ),
    "dealer": (
        "dealer",
        "A third service, run by a third operator, that hands the two parties correlated random numbers "
        "(“offline” bytes) which make the joint computation faster. It never receives any client's data or "
        "shares. The trust model assumes that at most one of party0, party1 and the dealer misbehaves.",
    ),
    "online-offline": (
        "online and offline bytes",
        "Online bytes travel between party0 and party1 during the job; offline bytes are the dealer's random "
        "numbers sent to the two parties.",
    ),
    "global-model": (
        "global model, model hash",
        "The federation's shared model; global model N is the model after training round N (or after an "
        "unlearning job). Each is named by its hash: the SHA-256 fingerprint of its exact parameters, of "
        "which the page shows the first 12 hexadecimal digits. A different model has a different hash.",
    ),
    "stored-rounds": (
        "stored rounds (T)",
        "The past training rounds whose client contributions the operators keep (as shares). Unlearning "
        "replays a selection of them without the forgotten client; retraining from scratch would redo all T.",
    ),
    "unlearning-round": (
        "unlearning round",
        "One step of the replay: a selected stored round recomputed without the forgotten client "
        "(numbered 1, 2, … in the order they run; “round” alone is the stored round replayed).",
    ),
    "certificate": (
        "erasure certificate",
        "One statement of the job (which model replaced which, what each operator deleted, what was revealed) "
        "signed by both operators. Anyone holding the deployment's CA certificate can check it offline with "
        "starfish verify; changing any character of it breaks both signatures.",
    ),
    "receipt": (
        "erasure receipt",
        "One operator's account of what it deleted for the forgotten client: rounds, files, bytes, database "
        "rows (overwritten on disk) and the SHA-256 fingerprints (share hashes) of the deleted shares.",
    ),
    "secmax": (
        "SecMax (threshold determination)",
        "Secure maximum, the job's first step: under 2PC, each remaining client's threshold is set to the "
        "largest of the thresholds it reported in its stored rounds. Nothing is revealed.",
    ),
    "secrs": (
        "SecRS (round selection)",
        "Secure round selection: under 2PC, the stored rounds are ranked by how strongly the forgotten "
        "client's contribution pointed the way the model moved, and the top σ·T rounds are kept. Only the set "
        "of kept rounds is opened (sorted by round number, never the ranking).",
    ),
    "secue": (
        "SecUE (update estimation)",
        "Secure update estimation: in each unlearning round, every remaining client's new contribution is "
        "estimated under 2PC from its stored one and a curvature (L-BFGS) correction, instead of asking the "
        "client to recompute it.",
    ),
    "sectc": (
        "SecTC (threshold checking)",
        "Secure threshold check: every T_c unlearning rounds, the parties check under 2PC whether each "
        "remaining client's estimate drifted beyond its threshold. One yes/no bit per client is opened (its "
        "correction flag); a flagged client is asked for its exact gradient.",
    ),
    "secmi": (
        "SecMI (matrix inversion)",
        "Secure inversion of a small matrix K of the curvature correction (the paper's Algorithm 7): K is "
        "multiplied by a secret random matrix R, the product K·R is opened and inverted, and R is removed "
        "under 2PC.",
    ),
    "exact-gradients": (
        "exact gradients (warm-up, correction, recovery)",
        "Unlearning rounds in which the remaining clients recompute their contribution on their own data "
        "instead of having it estimated: the first rounds (warm-up), rounds after a correction flag, and "
        "optional recovery rounds at the end. Each costs the clients a round of work and lowers ARP.",
    ),
    "arp": (
        "ARP (average round percentage saved)",
        "How much client work unlearning saved compared with retraining from scratch: the average over the "
        "remaining clients of (T − rounds the client had to recompute) / T. Retraining is 0 %; higher is cheaper.",
    ),
    "ter": (
        "TER (test error rate)",
        "The share of test examples the model gets wrong (lower is better). After unlearning it should be "
        "close to that of a model retrained without the forgotten client.",
    ),
    "ba-asr": (
        "BA-ASR (backdoor attack success rate)",
        "In quality tests the forgotten client planted a backdoor: a pattern that makes the model give a "
        "chosen wrong answer. BA-ASR is how often inputs carrying the pattern get that answer; once the client "
        "is forgotten it should fall to the level of a model retrained without it.",
    ),
    "mia-asr": (
        "MIA-ASR (membership-inference attack success rate)",
        "How often an attack that guesses whether an example was used in training guesses right on the "
        "forgotten client's examples; at the retrained model's level, its data no longer stands out.",
    ),
    "cohort": (
        "cohort",
        "The fewest clients whose contributions any one revealed value combines: a cohort of 4 means every "
        "such value is a sum over at least 4 clients. Cohort 1 marks a value about one client alone, such as "
        "its yes/no correction flag or curvature bit: one bit about the computation, not the client's data.",
    ),
    "federated-evaluation": (
        "federated evaluation",
        "After the job, each remaining client scores the new and the replaced model on its own data and sends "
        "its counts split into two meaningless halves, one to each operator. The operators check every answer "
        "is a sensible count and add them up together; only the totals over enough clients are revealed, never "
        "one client's counts.",
    ),
    "epsilon": (
        "ε (differential privacy budget)",
        "With differential privacy switched on, noise is added to the released aggregates and ε bounds what "
        "they can reveal about any one client (smaller is more private). “no DP” means no noise was added; "
        "the cohort rule still applies.",
    ),
    "release-rule": (
        "release rule (min_cohort)",
        "An unlearning update is made public only when every way of combining it with earlier public models "
        "involves at least min_cohort clients; otherwise it is held back or left out.",
    ),
    "theorem1": (
        "Theorem 1 inputs",
        "The paper's Theorem 1 bounds how far the unlearned model can be from a model retrained without the "
        "forgotten client. The job fixes some of the bound's inputs (the unlearning rate η_u, the selection "
        "rate σ and the number of selected rounds t_i); the others depend on the data and are not known.",
    ),
    "selected_rounds": (
        "selected_rounds (round selection)",
        "The set of stored rounds SecRS kept, opened sorted by round number. It combines every client of "
        "the history, so its cohort is the whole history.",
    ),
    "aggregate_gradients": (
        "aggregate_gradients (published updates)",
        "The model updates of the unlearning rounds, each a weighted average over the remaining clients "
        "(never one client's); they move the public model and are published only under the release rule.",
    ),
    "correction_flags": (
        "correction_flags (correction flags)",
        "One yes/no bit per remaining client and threshold check (SecTC): yes means the client's estimate "
        "drifted too far and the client was asked for its exact gradient. Cohort 1: each bit is about one "
        "client, and says only whether it was asked.",
    ),
    "curvature_bits": (
        "curvature_bits (curvature bits)",
        "One yes/no bit per client and offered curvature pair: whether the pair passed a numerical safety "
        "test and is used by SecUE. Cohort 1: each bit is about one client's pair, not its data.",
    ),
    "sample_decided_bits": (
        "sample_decided_bits (sample-decided bits)",
        "With a sample-first threshold check (check_sample > 0): one bit per client and check round saying "
        "whether a small public sample of coordinates already decided its correction flag.",
    ),
    "secmi_masked_products": (
        "secmi_masked_products (SecMI masked products)",
        "The products K·R that SecMI opens, one per client and curvature buffer state: a small matrix of the "
        "curvature correction multiplied by a secret random matrix. The mask hides the matrix, though not "
        "entirely its overall size.",
    ),
    "stage1_models": (
        "stage1_models (training-round models)",
        "The global models of the stored training rounds, public to the federation anyway; each is the "
        "average of its round's members, so its cohort is that round's number of clients.",
    ),
    "evaluation_sums": (
        "evaluation_sums (the federated evaluation's totals)",
        "The totals of the remaining clients' evaluation counts (correct answers of the new and the replaced "
        "model, examples, probe hits); never one client's counts, and only over at least the minimum cohort.",
    ),
    "unlearned_model": (
        "unlearned_model (the new model)",
        "The model the job produced and published, computed from the remaining clients' contributions only.",
    ),
}


def term(key: str, text: str | None = None) -> Html:
    """A link to the glossary entry `key`, showing `text` (default: the entry's name)."""
    name = TERMS[key][0]
    label = escape(text if text is not None else name)
    return Html(f'<a class="term" href="#term-{escape(key)}" title="{escape(name)}">{label}</a>')


def glossary() -> str:
    """The glossary section: every entry, with its anchor."""
    items = "".join(
        f'<dt id="term-{escape(key)}" data-term="{escape(key)}">{escape(name)}</dt><dd>{escape(text)}</dd>'
        for key, (name, text) in TERMS.items()
    )
    return section(
        "glossary",
        "Glossary",
        '<p class="note">The technical words of this page, in plain terms. Underlined words link here.</p>',
        f'<dl class="glossary">{items}</dl>',
    )
