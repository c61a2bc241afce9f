# The public names of this package, listed once (see pytest_toolguard.lazy_exports).
from .anthropic import from_anthropic as from_anthropic
from .definitions import BridgeError as BridgeError
from .definitions import BridgeWarning as BridgeWarning
from .langchain import from_langchain as from_langchain
from .mcp import from_mcp as from_mcp
from .mcp import risk_from_annotations as risk_from_annotations
from .openai import from_openai as from_openai
from .python import from_function as from_function
from .python import schema_from_signature as schema_from_signature
from .transcript import ImportReport as ImportReport
from .transcript import Problem as Problem
from .transcript import Transcript as Transcript
from .transcript import TranscriptCall as TranscriptCall
from .transcript import TranscriptResult as TranscriptResult
from .transcript import transcript_to_cassette as transcript_to_cassette
