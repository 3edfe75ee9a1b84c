/** Per-agent stats and pauses (agents.graphql, typed by graphql-codegen). */
export {
  AgentStatesDocument as AGENT_STATES,
  AgentStatsDocument as AGENT_STATS,
  PauseAgentDocument as PAUSE_AGENT,
  ResumeAgentDocument as RESUME_AGENT,
} from "../generated";
export type { AgentStatsFieldsFragment as AgentStats } from "../generated";
