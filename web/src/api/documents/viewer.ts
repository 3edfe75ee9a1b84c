import type { TypedDocumentNode } from "@apollo/client";
import { gql } from "@apollo/client";
import type { Agent, Viewer } from "../types";

export const VIEWER: TypedDocumentNode<{ viewer: Viewer }, Record<string, never>> = gql`
  query Viewer {
    viewer {
      user {
        id
        email
      }
      tenant {
        id
        slug
        name
      }
    }
  }
`;

export const AGENTS: TypedDocumentNode<{ agents: Agent[] }, Record<string, never>> = gql`
  query Agents {
    agents {
      name
      description
      inputSchema
    }
  }
`;
