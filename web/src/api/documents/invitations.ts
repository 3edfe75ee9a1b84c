import type { TypedDocumentNode } from "@apollo/client";
import { gql } from "@apollo/client";
import type { Invitation } from "../types";

/** Invitations (contract §4); apart from the runs documents for the same reason as webhooks. */

const INVITATION_FIELDS = gql`
  fragment InvitationFields on Invitation {
    id
    email
    status
    createdAt
    sentAt
  }
`;

export const INVITATIONS: TypedDocumentNode<
  { invitations: Invitation[] },
  Record<string, never>
> = gql`
  query Invitations {
    invitations {
      ...InvitationFields
    }
  }
  ${INVITATION_FIELDS}
`;

export const INVITE_MEMBER: TypedDocumentNode<{ inviteMember: Invitation }, { email: string }> = gql`
  mutation InviteMember($email: String!) {
    inviteMember(email: $email) {
      ...InvitationFields
    }
  }
  ${INVITATION_FIELDS}
`;
