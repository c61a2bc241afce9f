# The public names of this package, listed once (see pytest_toolguard.lazy_exports).
from .definitions.anthropic import from_anthropic as from_anthropic
from .definitions.langchain import from_langchain as from_langchain
from .definitions.mcp import from_mcp as from_mcp
from .definitions.mcp import risk_from_annotations as risk_from_annotations
from .definitions.openai import from_openai as from_openai
from .definitions.python import from_function as from_function
from .definitions.python import schema_from_signature as schema_from_signature
from .errors import BridgeError as BridgeError
from .errors import BridgeWarning as BridgeWarning
from .transcripts.into_cassette import ImportReport as ImportReport
from .transcripts.into_cassette import transcript_to_cassette as transcript_to_cassette
from .transcripts.transcript import Transcript as Transcript
from .transcripts.transcript import TranscriptCall as TranscriptCall
from .transcripts.transcript import TranscriptProblem as TranscriptProblem
from .transcripts.transcript import TranscriptResult as TranscriptResult
